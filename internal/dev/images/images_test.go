package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The archive must hold what containerd needs to run the binary: the tag,
// this platform, the entrypoint, an executable file and a writable /tmp.
func TestWriteArchive_RoundTrip(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o700); err != nil {
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
			if !bytes.Equal(b, []byte("#!binary")) {
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
