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
}

// epoch makes the archive reproducible: the same binary gives the same
// image digest.
var epoch = time.Unix(0, 0)

// Build returns the image for spec.
func Build(spec Spec) (v1.Image, error) {
	if err := checkStatic(spec.Binary); err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
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
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/" + spec.Entrypoint}
	cf.Config.User = spec.User
	cf.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cf)
}

// checkStatic refuses a dynamically linked binary: the images hold no
// dynamic loader, so its container would exit at once (runc then fails
// to join the sandbox's namespaces, far from the cause). CGO_ENABLED=1 in
// the environment of `go build` makes one.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return err
		}
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked, and the image has no dynamic loader: build it with CGO_ENABLED=0", path)
		}
	}
	return nil
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
