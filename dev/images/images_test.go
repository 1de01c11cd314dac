package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The archive must hold what containerd needs to run the binary: the tag,
// this platform, the entrypoint, an executable file and a writable /tmp.
func TestWriteArchive_RoundTrip(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, minimalELF(elf.PT_LOAD), 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "images.tar")
	spec := Spec{Ref: "docker.io/example/hello:dev", Binary: bin, Entrypoint: "hello", User: "1000",
		Files: map[string]string{"etc/ssl/certs/ca.crt": filepath.Join(dir, "missing")}}
	if err := WriteArchive(out, spec, Spec{Ref: "registry.k8s.io/pause:3.10", Binary: bin, Entrypoint: "pause"}); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("docker.io/example/hello:dev")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("archive has no %s: %v", tag, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/hello" || cf.Config.User != "1000" {
		t.Errorf("config: os %s arch %s entrypoint %v user %q", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.User)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == "hello" {
			b, _ := io.ReadAll(tr)
			if !bytes.Equal(b, minimalELF(elf.PT_LOAD)) {
				t.Errorf("binary content %q", b)
			}
		}
	}
	if h := files["hello"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("no executable /hello in the layer: %v", h)
	}
	if h := files["tmp/"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("no world-writable /tmp in the layer: %v", h)
	}
	if _, ok := files["etc/ssl/certs/ca.crt"]; ok {
		t.Error("a missing optional file was added")
	}

	// The same binary gives the same image: rebuilding changes nothing.
	again, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("digests differ between builds: %s %s", d1, d2)
	}
}

func TestWriteArchive_BadInput(t *testing.T) {
	dir := t.TempDir()
	if err := WriteArchive(filepath.Join(dir, "x.tar"), Spec{Ref: "UPPER/case:tag", Binary: "/bin/true", Entrypoint: "t"}); err == nil {
		t.Error("an invalid reference was accepted")
	}
	if err := WriteArchive(filepath.Join(dir, "x.tar"), Spec{Ref: "example/x:1", Binary: filepath.Join(dir, "nope"), Entrypoint: "t"}); err == nil {
		t.Error("a missing binary was accepted")
	}
}

// A dynamically linked binary would exit at once in the image (it has no
// loader): Build refuses it and says how to build it instead.
func TestBuild_RefusesADynamicallyLinkedBinary(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{"dynamic": minimalELF(elf.PT_INTERP), "script": []byte("#!/bin/sh\n")} {
		bin := filepath.Join(dir, name)
		if err := os.WriteFile(bin, content, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Build(Spec{Ref: "docker.io/example/" + name + ":dev", Binary: bin, Entrypoint: name})
		if err == nil {
			t.Fatalf("%s: built an image of a binary that cannot run in it", name)
		}
		if name == "dynamic" && !bytes.Contains([]byte(err.Error()), []byte("CGO_ENABLED=0")) {
			t.Errorf("the error does not say how to build a static binary: %v", err)
		}
	}
}

// minimalELF is an x86-64 ELF executable header with one program header
// of type prog: enough for debug/elf, not to run.
func minimalELF(prog elf.ProgType) []byte {
	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	_ = binary.Write(&b, binary.LittleEndian, hdr)
	_ = binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(prog)})
	return b.Bytes()
}

// An image's platform is its binary's: without one given, the ELF header
// says it; given one, a binary of another architecture is refused (a node
// of that platform would fail to exec it, far from the cause).
func TestBuild_PlatformIsTheBinarys(t *testing.T) {
	dir := t.TempDir()
	b := minimalELF(elf.PT_LOAD)
	b[18] = byte(elf.EM_AARCH64) // e_machine
	arm := filepath.Join(dir, "arm")
	if err := os.WriteFile(arm, b, 0o700); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Ref: "example/x:1", Binary: arm, Entrypoint: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if cf, _ := img.ConfigFile(); cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("an arm64 binary's image is %s/%s", cf.OS, cf.Architecture)
	}
	_, err = Build(Spec{Ref: "example/x:1", Binary: arm, Entrypoint: "x", Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}})
	if err == nil || !strings.Contains(err.Error(), "GOARCH=amd64") {
		t.Errorf("an arm64 binary as linux/amd64: %v; want a refusal saying how to build it", err)
	}
}
