package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	ggcrname "github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gitops-fleet/fleet/dev/devenv"
)

// fleetVersion is the part of `fleet version -o json` both sides must agree on.
type fleetVersion struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// TestImageFromRegistry is the path a user takes to their own registry:
// `make push-images` (the release target: static binaries, an image index)
// and `make push-images ARCHIVE=bin/images/fleet.tar` (the air-gapped path)
// push to a registry served over plain http on the node (go-containerregistry's
// registry, in this test process); the upstream's containerd pulls both
// images from it (pull policy Always, a reference no node has imported),
// and each, run, reports the same version and commit as bin/fleet.
func TestImageFromRegistry(t *testing.T) {
	start := time.Now()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	host := l.Addr().String()
	upstream := cluster("upstream")
	must(t, upstream.TrustHTTPRegistry(host))

	bin := os.Getenv("FLEET_BIN_DIR")
	if bin == "" {
		bin = filepath.Join(env.RepoDir, "bin")
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "fleet"), "version", "-o", "json").Output()
	must(t, err)
	var want fleetVersion
	must(t, json.Unmarshal(out, &want))

	pushed := regexp.MustCompile(`pushed (\S+)@(sha256:[0-9a-f]{64})`)
	push := func(args ...string) (ref, digest string) {
		t.Helper()
		// COMMIT is bin/fleet's: the suite may have left files in the work
		// tree since `make images`, which would make the Makefile's own
		// answer "-dirty" (that computation is internal/version's test).
		cmd := exec.CommandContext(t.Context(), "make", append([]string{"-C", env.RepoDir, "push-images", "INSECURE=1", "BIN=" + t.TempDir(), "COMMIT=" + want.Commit}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make push-images %v: %v\n%s", args, err, b)
		}
		m := pushed.FindSubmatch(b)
		if m == nil {
			t.Fatalf("make push-images %v did not say what it pushed:\n%s", args, b)
		}
		return string(m[1]), string(m[2])
	}
	releaseRef, releaseDigest := push("REGISTRY="+host+"/gitops-fleet", "PLATFORMS=linux/"+runtime.GOARCH)
	airgapRef, airgapDigest := push("REGISTRY="+host+"/mirror", "ARCHIVE="+filepath.Join(bin, "images", "fleet.tar"))
	t.Logf("pushed %s and %s in %.1fs", releaseRef, airgapRef, time.Since(start).Seconds())

	cs := clientset(t, "upstream")
	ns := "fleet-image-e2e"
	_, err = cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{})
	})
	container := func(name, image string) corev1.Container {
		return corev1.Container{Name: name, Image: image, ImagePullPolicy: corev1.PullAlways, Args: []string{"version", "-o", "json"}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-version", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(bool),
			Containers:                   []corev1.Container{container("release", releaseRef), container("airgap", airgapRef)},
		},
	}
	_, err = cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	must(t, err)
	err = devenv.Poll(t.Context(), 90*time.Second, func() error {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, devenv.PodReport(t.Context(), upstream, ns))
	}
	// One image both ways: the archive's image is the release index's
	// image for this platform (the builds are reproducible), so containerd
	// keeps one image and names it by either pushed digest.
	ref, err := ggcrname.ParseReference(releaseRef, ggcrname.Insecure)
	must(t, err)
	idx, err := remote.Index(ref)
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != runtime.GOARCH ||
		im.Manifests[0].Digest.String() != airgapDigest {
		t.Errorf("the release index %s holds %+v; want one linux/%s image, the archive's %s", releaseRef, im.Manifests, runtime.GOARCH, airgapDigest)
	}
	for _, st := range pod.Status.ContainerStatuses {
		// The image the node ran is the one pushed (by its digest in the registry).
		if !strings.HasSuffix(st.ImageID, "@"+releaseDigest) && !strings.HasSuffix(st.ImageID, "@"+airgapDigest) {
			t.Errorf("container %s ran image %s, not one pushed (%s, %s)", st.Name, st.ImageID, releaseDigest, airgapDigest)
		}
		logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: st.Name}).DoRaw(t.Context())
		must(t, err)
		var got fleetVersion
		if err := json.Unmarshal(logs, &got); err != nil {
			t.Fatalf("container %s: fleet version -o json: %v\n%s", st.Name, err, logs)
		}
		if got != want {
			t.Errorf("container %s (%s) reports %+v; bin/fleet reports %+v", st.Name, st.Image, got, want)
		}
	}
	t.Logf("pulled and ran in %.1fs in all", time.Since(start).Seconds())
}
