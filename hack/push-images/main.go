// Command push-images pushes the fleet image to a registry: `make
// push-images` runs it. From static binaries, one per platform, it pushes
// a multi-arch image index; from an image archive (`make images`,
// bin/images/fleet.tar) it pushes the archive's image as it is, the
// air-gapped path. It lives apart from cmd/fleet so the product binary
// does not link a registry client.
//
//	go run ./hack/push-images --image registry.example.com/gitops-fleet/fleet:0.1.0 \
//	    --binary linux/amd64=bin/release/linux-amd64/fleet --binary linux/arm64=bin/release/linux-arm64/fleet
//	go run ./hack/push-images --image registry.example.com/gitops-fleet/fleet:0.1.0 --archive bin/images/fleet.tar
//
// Credentials come from the docker config (~/.docker/config.json, `docker
// login` or `crane auth login`). Plain http is refused unless --insecure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gitops-fleet/fleet/dev/images"
)

// options are the command's flags.
type options struct {
	image    string
	binaries []string // platform=path
	archive  string
	insecure bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("push-images", flag.ContinueOnError)
	fs.StringVar(&o.image, "image", "", "where to push: host[:port]/path/fleet:tag")
	fs.Func("binary", "os/arch=path of a static fleet binary for that platform (repeat for each platform)", func(s string) error {
		o.binaries = append(o.binaries, s)
		return nil
	})
	fs.StringVar(&o.archive, "archive", "", "push the fleet image of this docker archive (make images: bin/images/fleet.tar or images.tar) instead of building from binaries")
	fs.BoolVar(&o.insecure, "insecure", false, "allow a registry served over plain http (no TLS)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "push-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	if o.image == "" {
		return errors.New("--image is required (host[:port]/path/fleet:tag)")
	}
	ref, err := name.NewTag(o.image, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--image %q must be host[:port]/path/fleet:tag: %w", o.image, err)
	}
	if o.insecure {
		ref, _ = name.NewTag(o.image, name.StrictValidation, name.Insecure)
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(transport(o.insecure)),
	}
	switch {
	case o.archive != "" && len(o.binaries) > 0:
		return errors.New("give either --archive or --binary, not both")
	case o.archive != "":
		img, src, err := archiveImage(o.archive)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img, ropts...); err != nil {
			return pushError(ref, err)
		}
		d, _ := img.Digest()
		cf, _ := img.ConfigFile()
		fmt.Fprintf(out, "pushed %s@%s (%s/%s, from %s in %s)\n", ref, d, cf.OS, cf.Architecture, src, o.archive)
		return nil
	case len(o.binaries) == 0:
		return errors.New("give --binary os/arch=path (one per platform) or --archive path")
	}
	idx, platforms, err := buildIndex(ref.String(), o.binaries)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, ropts...); err != nil {
		return pushError(ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pushed %s@%s (%s)\n", ref, d, strings.Join(platforms, ", "))
	return nil
}

// buildIndex makes one image per platform=binary and the index of them.
func buildIndex(ref string, binaries []string) (v1.ImageIndex, []string, error) {
	idx := mutate.IndexMediaType(empty.Index, types.DockerManifestList)
	seen := map[string]bool{}
	var platforms []string
	for _, b := range binaries {
		p, path, ok := strings.Cut(b, "=")
		if !ok || path == "" {
			return nil, nil, fmt.Errorf("--binary %q must be os/arch=path", b)
		}
		platform, err := v1.ParsePlatform(p)
		if err != nil || platform.OS == "" || platform.Architecture == "" {
			return nil, nil, fmt.Errorf("--binary %q: platform %q must be os/arch, e.g. linux/arm64", b, p)
		}
		if seen[platform.String()] {
			return nil, nil, fmt.Errorf("--binary %q: platform %s given twice", b, platform)
		}
		seen[platform.String()] = true
		img, err := images.Build(images.FleetSpec(ref, path, platform))
		if err != nil {
			return nil, nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})
		platforms = append(platforms, platform.String())
	}
	return idx, platforms, nil
}

// archiveImage finds the fleet image in a docker archive: the archive's
// only image, or the one whose repository ends in /fleet.
func archiveImage(path string) (v1.Image, string, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, "", fmt.Errorf("--archive %s is not a docker image archive (make images writes bin/images/fleet.tar): %w", path, err)
	}
	var found []string
	for _, d := range manifest {
		for _, t := range d.RepoTags {
			if len(manifest) == 1 || strings.HasSuffix(strings.SplitN(t, ":", 2)[0], "/fleet") {
				found = append(found, t)
			}
		}
	}
	if len(found) != 1 {
		return nil, "", fmt.Errorf("--archive %s: want exactly one fleet image, found %d (%v)", path, len(found), found)
	}
	tag, err := name.NewTag(found[0])
	if err != nil {
		return nil, "", err
	}
	img, err := tarball.Image(opener, &tag)
	if err != nil {
		return nil, "", err
	}
	return img, found[0], nil
}

// transport refuses plain http unless insecure: go-containerregistry
// falls back to http for localhost and private addresses on its own.
func transport(insecure bool) http.RoundTripper {
	base := remote.DefaultTransport
	if insecure {
		return base
	}
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.URL.Scheme == "http" {
			return nil, fmt.Errorf("%s does not answer over https; pass --insecure (make push-images INSECURE=1) to push over plain http", r.URL.Host)
		}
		return base.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func pushError(ref name.Tag, err error) error {
	return fmt.Errorf("pushing %s: %w", ref, err)
}
