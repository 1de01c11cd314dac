package deployer

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// largeManifests are n ConfigMaps of 200 KB of random hex each (~100 KB
// gzipped each), in namespace-less YAML as the renderer writes it.
func largeManifests(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 100<<10)
	var b strings.Builder
	for i := range n {
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: large-%d\ndata:\n  blob: %s\n", i, hex.EncodeToString(buf))
	}
	return b.String()
}

// chunkSecret is a chunk Secret as the controller writes it.
func (f *fixture) chunkSecret(bd string, enc *bundlecontent.Encoded, c bundlecontent.Chunk) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: c.Name, Labels: map[string]string{
			bundlecontent.ChunkLabel: "true", fleet.BundleLabel: bd, fleet.BundleNamespaceLabel: f.ws,
		}},
		Type: bundlecontent.ChunkSecretType, Immutable: ptr.To(true), Data: map[string][]byte{bundlecontent.KeyChunk: c.Data},
	}
}

// TestDeployer_ChunkedContentWaitsForItsChunksAndRefusesAChangedOne: content
// of more than one Secret is applied from its chunks; while a chunk is
// missing the BundleDeployment waits for content (naming the chunk) and
// applies nothing; the chunk's arrival wakes it (Secret watch, by label);
// a chunk changed afterwards is refused with ContentInvalid naming it,
// and the deployed objects stay.
func TestDeployer_ChunkedContentWaitsForItsChunksAndRefusesAChangedOne(t *testing.T) {
	f := newFixture(t)
	appNS := "chunks-" + f.suffix
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: appNS}
	manifests := largeManifests(14, 1)
	enc, err := bundlecontent.EncodeContent("app", []byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	if len(enc.Chunks) < 2 {
		t.Fatalf("%d chunks: the test needs content of more than one Secret", len(enc.Chunks))
	}
	ctx := t.Context()
	for _, c := range enc.Chunks[1:] {
		if err := f.up.Create(ctx, f.chunkSecret("app", enc, c)); err != nil {
			t.Fatal(err)
		}
	}
	index := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app"}, Type: bundlecontent.SecretType, Data: enc.Data}
	if err := f.up.Create(ctx, index); err != nil {
		t.Fatal(err)
	}
	id := bundlecontent.DeploymentID(enc.ManifestID, opts)
	f.updateBD("app", func(bd *fleet.BundleDeployment) {
		bd.Spec.Options, bd.Spec.DeploymentID = opts, id
		bd.Labels[fleet.BundleLabel], bd.Labels[fleet.BundleNamespaceLabel] = "app", f.ws
	})

	bd, _ := f.waitBD("app", 30*time.Second, "waiting for the missing chunk", func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, fleet.DeployedCondition)
		return c.Reason == WaitingForContentReason && strings.Contains(c.Message, enc.Chunks[0].Name)
	})
	if bd.Status.AppliedDeploymentID != "" || f.exists(cm(appNS, "large-0")) {
		t.Fatalf("applied without all its chunks: %q", bd.Status.AppliedDeploymentID)
	}

	start := time.Now()
	if err := f.up.Create(ctx, f.chunkSecret("app", enc, enc.Chunks[0])); err != nil {
		t.Fatal(err)
	}
	f.waitBD("app", 60*time.Second, "Ready from its chunks", readyFor(id))
	t.Logf("applied %s after the last chunk arrived", time.Since(start))
	for _, name := range []string{"large-0", "large-13"} {
		if !f.exists(cm(appNS, name)) {
			t.Errorf("configmap %s missing", name)
		}
	}

	// The last chunk replaced by one whose bytes differ (a chunk Secret is
	// immutable: delete and create), labels kept.
	last := enc.Chunks[len(enc.Chunks)-1]
	if err := f.up.Delete(ctx, f.chunkSecret("app", enc, last)); err != nil {
		t.Fatal(err)
	}
	changed := f.chunkSecret("app", enc, last)
	changed.Data[bundlecontent.KeyChunk] = append([]byte(nil), last.Data...)
	changed.Data[bundlecontent.KeyChunk][len(last.Data)/2] ^= 1
	if err := f.up.Create(ctx, changed); err != nil {
		t.Fatal(err)
	}
	bd, _ = f.waitBD("app", 30*time.Second, "the changed chunk refused", func(bd *fleet.BundleDeployment) bool {
		c := condition(bd, fleet.DeployedCondition)
		return c.Reason == ContentInvalidReason && strings.Contains(c.Message, last.Name) && strings.Contains(c.Message, "does not match its digest")
	})
	if bd.Status.AppliedDeploymentID != id || !f.exists(cm(appNS, "large-13")) {
		t.Errorf("the deployment in force changed: applied %q", bd.Status.AppliedDeploymentID)
	}
}
