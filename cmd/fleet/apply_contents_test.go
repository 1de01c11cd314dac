package main

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// writeBigCheckout writes directory big of root: 4 ConfigMaps of 600 KB of
// random base64 each (gzip keeps three quarters of it), so the Bundle's
// resources are 2.4 MB, more than 1.5 MiB gzipped.
func writeBigCheckout(t *testing.T, root, seed string) {
	t.Helper()
	for i := range 4 {
		r := rand.New(rand.NewPCG(uint64(i), uint64(len(seed))))
		raw := make([]byte, 450<<10)
		for j := range raw {
			raw[j] = byte(r.Uint32())
		}
		writeFile(t, root, fmt.Sprintf("big/cm-%d.yaml", i), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-%d\ndata:\n  seed: %s\n  blob: %s\n", i, seed, base64.StdEncoding.EncodeToString(raw)))
	}
}

// contentsSecrets lists the contents Secrets of Bundle ws/name.
func contentsSecrets(t *testing.T, c client.Client, ws, name string) []corev1.Secret {
	t.Helper()
	list := &corev1.SecretList{}
	if err := c.List(t.Context(), list, client.InNamespace(ws), client.MatchingLabels{bundlecontent.ContentsLabel: "true", fleet.BundleLabel: name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestApply_LargeBundleIsWrittenAsContentsSecrets: `fleet apply` of a
// directory whose resources are 2.4 MB (more than etcd takes in one
// object) writes immutable contents Secrets owned by the Bundle and the
// Bundle with spec.contentsId and no resources; `fleet apply -o` writes the
// Secrets before the Bundle, and `fleet render bundle` renders from that
// file, or from the cluster with --kubeconfig, and without either refuses
// naming the Secret; a new version replaces the Secrets and the old ones
// are deleted; an identity that may write Bundles but not Secrets is
// refused and no Bundle is written; deleting the Bundle collects them.
func TestApply_LargeBundleIsWrittenAsContentsSecrets(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	c := env.Upstream.Client
	ws := testenv.Namespace(t, c, "fleet-apply-big-")
	kc := writeFile(t, t.TempDir(), "kubeconfig", string(env.Upstream.Kubeconfig))
	root := t.TempDir()
	writeBigCheckout(t, root, "one")

	// -o: the Secrets, then the Bundle.
	dir := t.TempDir()
	out := filepath.Join(dir, "bundles.yaml")
	if code, stdout, stderr := runMain(t, "apply", "-o", out, "-n", ws, "--root", root, "test", "big"); code != 0 {
		t.Fatalf("apply -o: exit %d, %s %s", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	docs := splitDocs(data)
	var kinds []string
	var bundleDoc []byte
	for _, d := range docs {
		var m typeMeta
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, m.Kind)
		if m.Kind == "Bundle" {
			bundleDoc = d
		}
	}
	if len(kinds) < 3 || kinds[len(kinds)-1] != "Bundle" || strings.Count(strings.Join(kinds, ","), "Secret") != len(kinds)-1 {
		t.Fatalf("apply -o wrote %v, want Secrets then the Bundle", kinds)
	}
	offline := &fleet.Bundle{}
	if err := yaml.Unmarshal(bundleDoc, offline); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(offline.Spec.ContentsID, "s-") || len(offline.Spec.Resources) != 0 {
		t.Fatalf("the Bundle of -o: contentsId %q, %d resources", offline.Spec.ContentsID, len(offline.Spec.Resources))
	}
	rendered := func(stdout, seed string) error {
		for i := range 4 {
			if !strings.Contains(stdout, fmt.Sprintf("name: big-%d", i)) {
				return fmt.Errorf("big-%d not rendered", i)
			}
		}
		if strings.Count(stdout, "seed: "+seed) != 4 {
			return fmt.Errorf("seed %s not in the 4 ConfigMaps", seed)
		}
		return nil
	}
	code, stdout, stderr := runMain(t, "render", "bundle", "--bundle", out)
	if err := rendered(stdout, "one"); code != 0 || err != nil {
		t.Errorf("render bundle of the -o file: exit %d, %v; stderr %s", code, err, stderr)
	}
	bundleOnly := writeFile(t, dir, "bundle.yaml", string(bundleDoc))
	index := bundlecontent.ContentsSecretName("test-big", offline.Spec.ContentsID)
	code, _, stderr = runMain(t, "render", "bundle", "--bundle", bundleOnly)
	if code != 2 || !strings.Contains(stderr, ws+"/"+index) || !strings.Contains(stderr, "--kubeconfig") {
		t.Errorf("render bundle of the Bundle alone: exit %d, stderr %q; want 2 naming Secret %s/%s", code, stderr, ws, index)
	}

	// To the cluster.
	code, stdout, stderr = runMain(t, "apply", "--kubeconfig", kc, "-n", ws, "--root", root, "test", "big")
	if code != 0 || !strings.Contains(stdout, "Bundle "+ws+"/test-big created") {
		t.Fatalf("apply: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	b := &fleet.Bundle{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "test-big"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.ContentsID != offline.Spec.ContentsID || len(b.Spec.Resources) != 0 {
		t.Fatalf("Bundle as written: contentsId %q (want %q), %d resources", b.Spec.ContentsID, offline.Spec.ContentsID, len(b.Spec.Resources))
	}
	first := contentsSecrets(t, c, ws, "test-big")
	if len(first) != len(kinds)-1 {
		t.Errorf("%d contents Secrets in the cluster, %d in the -o file", len(first), len(kinds)-1)
	}
	for _, s := range first {
		ref := metav1.GetControllerOf(&s)
		if s.Immutable == nil || !*s.Immutable || ref == nil || ref.Kind != "Bundle" || ref.UID != b.UID || s.Annotations[bundlecontent.ContentsIDAnnotation] != b.Spec.ContentsID {
			t.Errorf("Secret %s: immutable %v, controller %v, annotations %v", s.Name, s.Immutable, ref, s.Annotations)
		}
	}
	code, stdout, stderr = runMain(t, "render", "bundle", "--bundle", bundleOnly, "--kubeconfig", kc)
	if err := rendered(stdout, "one"); code != 0 || err != nil {
		t.Errorf("render bundle from the cluster: exit %d, %v; stderr %s", code, err, stderr)
	}
	if code, stdout, stderr = runMain(t, "apply", "--kubeconfig", kc, "-n", ws, "--root", root, "test", "big"); code != 0 || !strings.Contains(stdout, "test-big unchanged") {
		t.Errorf("apply again: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// A new version: new Secrets, the old ones deleted by the writer.
	writeBigCheckout(t, root, "two")
	if code, stdout, stderr = runMain(t, "apply", "--kubeconfig", kc, "-n", ws, "--root", root, "test", "big"); code != 0 {
		t.Fatalf("apply of version two: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "test-big"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.ContentsID == offline.Spec.ContentsID {
		t.Fatal("version two has the contentsId of version one")
	}
	for _, s := range contentsSecrets(t, c, ws, "test-big") {
		if s.Annotations[bundlecontent.ContentsIDAnnotation] != b.Spec.ContentsID && s.DeletionTimestamp.IsZero() {
			t.Errorf("Secret %s of the contents before is left", s.Name)
		}
	}

	// Alice may write Bundles in her namespace, not Secrets: a large
	// Bundle is refused by the API server, and no Bundle is written
	// without its contents.
	alice := testenv.Namespace(t, c, "fleet-apply-big-alice-")
	code, _, stderr = runMain(t, "apply", "--kubeconfig", bundleWriterKubeconfig(t, env, alice), "-n", alice, "--root", root, "test", "big")
	if code != 1 || !strings.Contains(stderr, `User "alice" cannot create resource "secrets"`) {
		t.Errorf("alice's large Bundle: exit %d, stderr %q; want 1 and the API server's refusal of the Secrets", code, stderr)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: alice, Name: "test-big"}, &fleet.Bundle{}); err == nil {
		t.Errorf("alice's Bundle was written without its contents")
	}

	// Deleting the Bundle: its contents go with it (owner references).
	if err := c.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "contents Secrets collected with the Bundle", func() error {
		if n := len(contentsSecrets(t, c, ws, "test-big")); n > 0 {
			return fmt.Errorf("%d contents Secrets left", n)
		}
		return nil
	})
}
