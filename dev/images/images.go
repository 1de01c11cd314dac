// Package images builds the project's container images without a registry
// or a container engine: a static binary becomes a one-layer image, written
// as a docker archive that containerd imports (`ctr images import`).
package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Spec is one image: a binary at /<Entrypoint> plus optional extra files.
type Spec struct {
	// Ref is the image reference, e.g. docker.io/gitops-fleet/fleet:dev.
	Ref string
	// Binary is the path of the static executable to ship.
	Binary string
	// Entrypoint is the binary's name inside the image (at the root).
	Entrypoint string
	// Files are extra files: path in the image → path on this machine.
	// Missing source files are skipped (a CA bundle, say).
	Files map[string]string
	// User the image runs as by default.
	User string
	// Platform is the image's platform; nil means linux and the binary's
	// architecture. A binary for another architecture is refused.
	Platform *v1.Platform
}

// epoch makes the archive reproducible: the same binary gives the same
// image digest.
var epoch = time.Unix(0, 0)

// Build returns the image for spec.
func Build(spec Spec) (v1.Image, error) {
	arch, err := checkStatic(spec.Binary)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	platform := v1.Platform{OS: "linux", Architecture: arch}
	if spec.Platform != nil {
		platform = *spec.Platform
		if platform.OS != "linux" {
			return nil, fmt.Errorf("image %s: platform %s: only linux images can be built", spec.Ref, platform)
		}
		if arch != platform.Architecture {
			return nil, fmt.Errorf("image %s: %s is a %s binary, not %s: build it with GOOS=linux GOARCH=%s", spec.Ref, spec.Binary, arch, platform, platform.Architecture)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(path string, mode int64, src string) error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: mode, Size: st.Size(), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	}
	for _, dir := range []string{"tmp/", "etc/", "etc/ssl/", "etc/ssl/certs/"} {
		mode := int64(0o755)
		if dir == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: mode, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	if err := add(spec.Entrypoint, 0o755, spec.Binary); err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	for dst, src := range spec.Files {
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := add(dst, 0o644, src); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	// containerd imports only images for its platform.
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/" + spec.Entrypoint}
	cf.Config.User = spec.User
	cf.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cf)
}

// goarch names the architecture of an ELF machine as GOARCH does.
var goarch = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_ARM: "arm", elf.EM_386: "386",
	elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
}

// checkStatic refuses a dynamically linked binary: the images hold no
// dynamic loader, so its container would exit at once (runc then fails
// to join the sandbox's namespaces, far from the cause). CGO_ENABLED=1 in
// the environment of `go build` makes one. It returns the binary's
// architecture (GOARCH), or this machine's when it is not one Go knows.
func checkStatic(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked, and the image has no dynamic loader: build it with CGO_ENABLED=0", path)
		}
	}
	if arch, ok := goarch[f.Machine]; ok {
		return arch, nil
	}
	return runtime.GOARCH, nil
}

// WriteArchive writes the images into one docker archive at path.
func WriteArchive(path string, specs ...Spec) error {
	refs := map[name.Reference]v1.Image{}
	for _, s := range specs {
		ref, err := name.ParseReference(s.Ref)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", s.Ref, err)
		}
		img, err := Build(s)
		if err != nil {
			return err
		}
		refs[ref] = img
	}
	tmp := path + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// FleetSpec is the fleet image: the static fleet binary as /fleet, run as
// user 1000, with this machine's CA bundle (agents and the controller
// verify servers with the system store unless told otherwise). platform
// nil means the binary's own.
func FleetSpec(ref, binary string, platform *v1.Platform) Spec {
	return Spec{Ref: ref, Binary: binary, Entrypoint: "fleet", User: "1000", Platform: platform,
		Files: map[string]string{"etc/ssl/certs/ca-certificates.crt": "/etc/ssl/certs/ca-certificates.crt"}}
}
