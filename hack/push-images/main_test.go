package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gitops-fleet/fleet/dev/images"
)

// newRegistry serves a real OCI distribution registry (go-containerregistry's
// pkg/registry) over plain http on a loopback port, as a user's local or
// air-gapped registry would be.
func newRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// staticELF writes a static ELF executable header for machine: enough for
// the image builder's checks, not to run.
func staticELF(t *testing.T, dir, file string, machine elf.Machine) string {
	t.Helper()
	var b bytes.Buffer
	hdr := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT), Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	_ = binary.Write(&b, binary.LittleEndian, hdr)
	_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD)})
	b.WriteString(file) // tells the binaries apart
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func push(t *testing.T, o options) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), o, &out)
	return out.String(), err
}

// imageFile returns the content of path in img's single layer.
func imageFile(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the image: %v", path, err)
		}
		if h.Name == path {
			b, _ := io.ReadAll(tr)
			return b
		}
	}
}

// TestPush_MultiArchIndex is the release path: one static binary per
// platform pushed as one tag, an image index a node of either
// architecture pulls its own image from, each running that binary.
func TestPush_MultiArchIndex(t *testing.T) {
	reg := newRegistry(t)
	dir := t.TempDir()
	amd := staticELF(t, dir, "fleet-amd64", elf.EM_X86_64)
	arm := staticELF(t, dir, "fleet-arm64", elf.EM_AARCH64)
	ref := reg + "/gitops-fleet/fleet:0.1.0"
	out, err := push(t, options{image: ref, binaries: []string{"linux/amd64=" + amd, "linux/arm64=" + arm}, insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "linux/amd64, linux/arm64") {
		t.Errorf("the output does not name the platforms pushed: %q", out)
	}

	tag, _ := name.NewTag(ref, name.Insecure)
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatalf("pulling the index back: %v", err)
	}
	if d, _ := idx.Digest(); !strings.Contains(out, d.String()) {
		t.Errorf("the output does not give the pushed digest %s: %q", d, out)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"amd64": amd, "arm64": arm}
	if len(im.Manifests) != len(want) {
		t.Fatalf("index has %d manifests, want %d", len(im.Manifests), len(want))
	}
	for _, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" || want[m.Platform.Architecture] == "" {
			t.Fatalf("unexpected platform %v in the index", m.Platform)
		}
		// What a node of that architecture pulls: by digest, from the registry.
		img, err := remote.Image(tag.Context().Digest(m.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.OS != "linux" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/fleet" || cf.Config.User != "1000" {
			t.Errorf("%s image config: %s/%s entrypoint %v user %q", m.Platform.Architecture, cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.User)
		}
		bin, _ := os.ReadFile(want[m.Platform.Architecture])
		if got := imageFile(t, img, "fleet"); !bytes.Equal(got, bin) {
			t.Errorf("%s image holds the wrong binary", m.Platform.Architecture)
		}
	}
}

// TestPush_Refusals: plain http only with --insecure (go-containerregistry
// would fall back to it silently for loopback and private addresses), a
// binary of another architecture than its platform, bad flags; each with a
// message that says what to do, and nothing pushed.
func TestPush_Refusals(t *testing.T) {
	reg := newRegistry(t)
	dir := t.TempDir()
	amd := staticELF(t, dir, "fleet-amd64", elf.EM_X86_64)
	ref := reg + "/gitops-fleet/fleet:0.1.0"
	for _, tc := range []struct {
		name string
		o    options
		want string
	}{
		{"http without --insecure", options{image: ref, binaries: []string{"linux/amd64=" + amd}}, "--insecure"},
		{"binary of another architecture", options{image: ref, binaries: []string{"linux/arm64=" + amd}, insecure: true}, "is a amd64 binary, not linux/arm64: build it with GOOS=linux GOARCH=arm64"},
		{"platform without arch", options{image: ref, binaries: []string{"linux=" + amd}, insecure: true}, "must be os/arch"},
		{"same platform twice", options{image: ref, binaries: []string{"linux/amd64=" + amd, "linux/amd64=" + amd}, insecure: true}, "given twice"},
		{"no image", options{binaries: []string{"linux/amd64=" + amd}, insecure: true}, "--image is required"},
		{"image without tag", options{image: reg + "/gitops-fleet/fleet", binaries: []string{"linux/amd64=" + amd}, insecure: true}, "host[:port]/path/fleet:tag"},
		{"nothing to push", options{image: ref, insecure: true}, "--binary os/arch=path"},
		{"archive that is not one", options{image: ref, archive: amd, insecure: true}, "is not a docker image archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := push(t, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	tag, _ := name.NewTag(ref, name.Insecure)
	if _, err := remote.Head(tag); err == nil {
		t.Error("a refused push left an image in the registry")
	}
}

// TestPush_Archive is the air-gapped path: the fleet image of `make
// images`' archive (also the dev clusters' archive, which holds the pause
// image too) pushed as it is, the same digest in the registry.
func TestPush_Archive(t *testing.T) {
	reg := newRegistry(t)
	dir := t.TempDir()
	amd := staticELF(t, dir, "fleet", elf.EM_X86_64)
	pause := staticELF(t, dir, "pause", elf.EM_X86_64)
	archive := filepath.Join(dir, "images.tar")
	fleetImage := images.FleetSpec("docker.io/gitops-fleet/fleet:0.1.0", amd, nil)
	if err := images.WriteArchive(archive, fleetImage, images.Spec{Ref: "registry.k8s.io/pause:3.10", Binary: pause, Entrypoint: "pause"}); err != nil {
		t.Fatal(err)
	}
	ref := reg + "/mirror/fleet:0.1.0"
	out, err := push(t, options{image: ref, archive: archive, insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := name.NewTag("docker.io/gitops-fleet/fleet:0.1.0")
	want, err := tarball.ImageFromPath(archive, &src)
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := want.Digest()
	tag, _ := name.NewTag(ref, name.Insecure)
	got, err := remote.Image(tag)
	if err != nil {
		t.Fatalf("pulling the pushed image: %v", err)
	}
	if d, _ := got.Digest(); d != wantDigest {
		t.Errorf("pushed digest %s, the archive's image is %s", d, wantDigest)
	}
	if !strings.Contains(out, wantDigest.String()) || !strings.Contains(out, "docker.io/gitops-fleet/fleet:0.1.0") {
		t.Errorf("the output does not say what was pushed: %q", out)
	}
}
