package agent_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// bigTemplates render .Values.count ConfigMaps, each holding the chart's
// file blob.txt (600 KB of random base64, which gzip cannot shrink below
// three quarters) and the seed. The copies are further apart than gzip's
// window, so each costs its full size: 8 copies are more than 3.5 MB
// gzipped, from a Bundle of 600 KB.
const bigTemplates = `{{- $blob := .Files.Get "files/blob.txt" }}
{{- range $i := until (int .Values.count) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: big-{{ $i }}
data:
  seed: {{ $.Values.seed | quote }}
  blob: {{ $blob | quote }}
{{- end }}
`

// bigBlob is blob.txt: 600 KB of base64 of deterministic random bytes.
func bigBlob() string {
	r := rand.New(rand.NewPCG(29, 3))
	raw := make([]byte, 450<<10)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// chunkSecrets lists the chunk Secrets of Bundle ws/name in a cluster
// namespace, as the admin sees them.
func chunkSecrets(t *testing.T, ns, ws, name string) []corev1.Secret {
	t.Helper()
	list := &corev1.SecretList{}
	if err := up.List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels{bundlecontent.ChunkLabel: "true", fleet.BundleLabel: name, fleet.BundleNamespaceLabel: ws}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// upstreamAs is a client of the upstream with the request identity the
// agent in agentNS of ds holds.
func upstreamAs(t *testing.T, ds *controlplane.ControlPlane, agentNS string) client.Client {
	t.Helper()
	s, err := localSecret(t, ds, agentNS, registration.AgentCredentialSecretName)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[registration.KeyKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: up.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBundle_LargeContentTravelsInVerifiedChunks: a Bundle whose rendered
// content is more than 1.5 MiB gzipped (more than etcd takes in one object)
// deploys to two clusters through chunk Secrets; each agent's identity
// reads its own cluster's chunks and is refused another's; a new version
// replaces the chunks and the old ones are deleted; a chunk changed behind
// the controller's back is refused with ContentInvalid, and deleting it lets
// the controller write it again; deleting the
// Bundle takes the chunks with it.
func TestBundle_LargeContentTravelsInVerifiedChunks(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-big-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	type member struct {
		ds      *controlplane.ControlPlane
		agentNS string
		name    string
		ns      string // cluster namespace upstream
	}
	var members []*member
	for i := range 2 {
		ds := envDownstream(i)
		agentNS := fmt.Sprintf("agent-%s-%d", ws, i)
		helmInstall(t, ds, agentNS, values, map[string]any{"clientID": fmt.Sprintf("%s-%d", ws, i), "labels": map[string]any{"content": "big"}})
		a := startAgent(t, ds, agentNS, nil)
		_, name := waitRegistered(t, a)
		members = append(members, &member{ds: ds, agentNS: agentNS, name: name})
	}
	appNS := "big-" + ws
	// 4 ConfigMaps of 600 KB of incompressible text: about 1.8 MB gzipped,
	// two chunks (more only costs time: the chunking is the same).
	const count = 4
	blob := bigBlob()

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "big"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: appNS,
				Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"count": count, "seed": "one"}}},
				IgnoreOptions:    &fleet.IgnoreOptions{},
				CorrectDrift:     &fleet.CorrectDrift{},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: big\nversion: 0.1.0\n"},
				{Name: "chart/templates/big.yaml", Content: bigTemplates},
				{Name: "chart/files/blob.txt", Content: blob},
			},
			Targets: []fleet.BundleTarget{{
				ClusterSelector:         &metav1.LabelSelector{MatchLabels: map[string]string{"content": "big"}},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{IgnoreOptions: &fleet.IgnoreOptions{}},
			}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	deployed := func(seed string) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, "content of seed "+seed+" on both clusters, Bundle Ready 2/2", func() error {
			for _, m := range members {
				for _, i := range []int{0, count - 1} {
					cm, err := configMap(t, m.ds, appNS, "big-"+strconv.Itoa(i))
					if err != nil {
						return fmt.Errorf("cluster %s: %w (Bundle: %s)", m.name, err, conditionsOf(bundleStatus(t, ws, "big").Status.Conditions))
					}
					if cm.Data["seed"] != seed || cm.Data["blob"] != blob {
						return fmt.Errorf("cluster %s: big-%d has seed %q and %d bytes of blob", m.name, i, cm.Data["seed"], len(cm.Data["blob"]))
					}
				}
			}
			if got := bundleStatus(t, ws, "big"); got.Status.Display.ReadyClusters != "2/2" {
				return fmt.Errorf("readyClusters %q", got.Status.Display.ReadyClusters)
			}
			return nil
		})
	}
	deployed("one")

	// Upstream: per cluster, an index and its chunks, each at most a chunk
	// long, immutable, owned by the BundleDeployment; more than etcd's
	// object limit (1.5 MiB) in all.
	content := func(m *member) (*corev1.Secret, bundlecontent.Index, []corev1.Secret) {
		t.Helper()
		s := &corev1.Secret{}
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: m.ns, Name: "big"}, s); err != nil {
			t.Fatal(err)
		}
		var idx bundlecontent.Index
		if err := json.Unmarshal(s.Data[bundlecontent.KeyChunks], &idx); err != nil {
			t.Fatalf("content Secret %s/big holds no index of chunks (keys %v): %v", m.ns, keys(s.Data), err)
		}
		return s, idx, chunkSecrets(t, m.ns, ws, "big")
	}
	bds := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: "big", fleet.BundleNamespaceLabel: ws}); err != nil || len(bds.Items) != 2 {
		t.Fatalf("%d BundleDeployments (%v)", len(bds.Items), err)
	}
	for _, m := range members {
		for _, bd := range bds.Items {
			if bd.Labels[fleet.ClusterLabel] == m.name {
				m.ns = bd.Namespace
			}
		}
	}
	var firstIndex []bundlecontent.Index
	for _, m := range members {
		s, idx, chunks := content(m)
		if idx.Size <= 3<<19 || len(chunks) < 2 || len(chunks) != len(idx.Chunks) || s.Annotations[bundle.ChunksAnnotation] != strconv.Itoa(len(chunks)) {
			t.Fatalf("cluster %s: %d gzipped bytes, %d chunk Secrets, the index names %d (annotation %q)", m.name, idx.Size, len(chunks), len(idx.Chunks), s.Annotations[bundle.ChunksAnnotation])
		}
		for _, c := range chunks {
			ref := metav1.GetControllerOf(&c)
			if c.Immutable == nil || !*c.Immutable || len(c.Data[bundlecontent.KeyChunk]) > bundlecontent.MaxChunkBytes || ref == nil || ref.Kind != "BundleDeployment" || ref.Name != "big" {
				t.Errorf("chunk %s/%s: immutable %v, %d bytes, controller %v", c.Namespace, c.Name, c.Immutable, len(c.Data[bundlecontent.KeyChunk]), ref)
			}
		}
		firstIndex = append(firstIndex, idx)
	}
	t.Logf("content: %d bytes gzipped in %d chunks per cluster", firstIndex[0].Size, len(firstIndex[0].Chunks))

	// Each agent's identity reads its own cluster's chunks and not the
	// other cluster's: real requests as the request identity.
	for i, m := range members {
		other := members[1-i]
		as := upstreamAs(t, m.ds, m.agentNS)
		own := &corev1.Secret{}
		if err := as.Get(t.Context(), client.ObjectKey{Namespace: m.ns, Name: firstIndex[i].Chunks[0].Name}, own); err != nil {
			t.Errorf("cluster %s cannot read its own chunk: %v", m.name, err)
		}
		err := as.Get(t.Context(), client.ObjectKey{Namespace: other.ns, Name: firstIndex[1-i].Chunks[0].Name}, &corev1.Secret{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("cluster %s reading cluster %s's chunk: %v, want Forbidden", m.name, other.name, err)
		}
		err = as.List(t.Context(), &corev1.SecretList{}, client.InNamespace(other.ns))
		if !apierrors.IsForbidden(err) {
			t.Errorf("cluster %s listing cluster %s's Secrets: %v, want Forbidden", m.name, other.name, err)
		}
	}

	// A new version: new chunks, the old ones deleted.
	updateBundle(t, ws, "big", func(b *fleet.Bundle) { b.Spec.Helm.Values.Data["seed"] = "two" })
	deployed("two")
	for i, m := range members {
		testenv.Eventually(t, 60*time.Second, "old chunks of cluster "+m.name+" deleted", func() error {
			_, idx, chunks := content(m)
			if idx.ManifestID == firstIndex[i].ManifestID {
				return fmt.Errorf("the index still names the first content")
			}
			if len(chunks) != len(idx.Chunks) {
				return fmt.Errorf("%d chunk Secrets for an index of %d", len(chunks), len(idx.Chunks))
			}
			for _, c := range chunks {
				if c.Annotations[bundle.ManifestIDAnnotation] != idx.ManifestID {
					return fmt.Errorf("chunk %s of content %s is left", c.Name, c.Annotations[bundle.ManifestIDAnnotation])
				}
			}
			return nil
		})
	}

	// A chunk changed behind the controller's back (an admin's delete and
	// create, as chunks are immutable), with every label and annotation
	// kept: the agent refuses the content with ContentInvalid, naming the
	// chunk; what it deployed stays as it is.
	victim := members[0]
	_, idx, _ := content(victim)
	orig := &corev1.Secret{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: victim.ns, Name: idx.Chunks[1].Name}, orig); err != nil {
		t.Fatal(err)
	}
	if err := up.Delete(t.Context(), orig); err != nil {
		t.Fatal(err)
	}
	forged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: orig.Namespace, Name: orig.Name, Labels: orig.Labels, Annotations: orig.Annotations, OwnerReferences: orig.OwnerReferences},
		Type:       orig.Type, Immutable: orig.Immutable, Data: map[string][]byte{bundlecontent.KeyChunk: append([]byte(nil), orig.Data[bundlecontent.KeyChunk]...)},
	}
	forged.Data[bundlecontent.KeyChunk][4096] ^= 0x55
	if err := up.Create(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	var bd fleet.BundleDeployment
	testenv.Eventually(t, 60*time.Second, "the changed chunk refused", func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: victim.ns, Name: "big"}, &bd); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bd.Status.Conditions, fleet.DeployedCondition)
		if c == nil || c.Reason != fleet.ContentInvalidReason || !strings.Contains(c.Message, idx.Chunks[1].Name) || !strings.Contains(c.Message, "does not match its digest") {
			return fmt.Errorf("Deployed %+v", c)
		}
		return nil
	})
	if cm, err := configMap(t, victim.ds, appNS, "big-0"); err != nil || cm.Data["seed"] != "two" {
		t.Errorf("big-0 after the refusal: %v", err)
	}
	// Deleting the changed chunk: the controller writes it again, the agent
	// is back to Ready.
	if err := up.Delete(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the chunk written again and the content Ready", func() error {
		if err := up.Get(t.Context(), client.ObjectKey{Namespace: victim.ns, Name: "big"}, &bd); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})

	// The Bundle deleted: its BundleDeployments go, and their chunks with
	// them (owner references).
	if err := up.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		testenv.Eventually(t, 2*time.Minute, "chunks of cluster "+m.name+" gone with the Bundle", func() error {
			if n := len(chunkSecrets(t, m.ns, ws, "big")); n > 0 {
				return fmt.Errorf("%d chunk Secrets left", n)
			}
			return nil
		})
	}
}

func conditionsOf(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s %s: %.300s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}
