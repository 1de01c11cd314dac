package agent_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/bundlecontents"
)

// randomBase64 is n bytes of base64 of random bytes (gzip keeps three
// quarters of them).
func randomBase64(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 7))
	raw := make([]byte, n*3/4)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// writeLarge writes Bundle b as fleet apply does (bundlecontents, then
// server-side apply of the Bundle); skip leaves out the Secrets whose index
// it holds (to write them later), returned.
func writeLarge(t *testing.T, b *fleet.Bundle, skip ...int) (*fleet.Bundle, []*corev1.Secret, []*corev1.Secret) {
	t.Helper()
	split, secrets, err := bundlecontents.Split(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) < 3 {
		t.Fatalf("the Bundle was split into %d Secrets, want chunks and an index", len(secrets))
	}
	var write, held []*corev1.Secret
	for i, s := range secrets {
		if containsInt(skip, i) {
			held = append(held, s)
		} else {
			write = append(write, s)
		}
	}
	mgr := apply.NewManager(up)
	err = bundlecontents.Write(t.Context(), up, split, write, func(ctx context.Context, b *fleet.Bundle) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
		if err != nil {
			return err
		}
		delete(m, "status")
		delete(m["metadata"].(map[string]any), "creationTimestamp")
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(fleet.GroupVersion.String())
		u.SetKind("Bundle")
		_, err = mgr.Apply(ctx, u, ssa.DefaultApplyOptions())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return split, secrets, held
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestBundle_LargeInputTravelsAsVerifiedContents: a Bundle whose resources
// are more than 3 MB (1.5 MiB and more gzipped: no single object holds
// them) is written as fleet apply writes it, contents Secrets and the
// Bundle with spec.contentsId, and deploys to a cluster through a real
// agent. A chunk missing keeps the Bundle WaitingForContents until it
// appears; the agent's identity cannot read the contents (they stay in
// the workspace); a new version replaces them and the old ones are
// deleted; a chunk changed behind the writer's back stalls the Bundle with
// ContentsInvalid naming it, and the deployment in force stays; deleting
// the Bundle collects its contents.
func TestBundle_LargeInputTravelsAsVerifiedContents(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-contents-")
	values := newToken(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{})
	ds := envDownstream(0)
	agentNS := "agent-" + ws
	helmInstall(t, ds, agentNS, values, map[string]any{"clientID": ws, "labels": map[string]any{"contents": "large"}})
	a := startAgent(t, ds, agentNS, nil)
	_, clusterName := waitRegistered(t, a)
	appNS := "contents-" + ws

	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "large"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace: appNS,
				Helm:             &fleet.HelmOptions{Chart: "chart", Values: &fleet.GenericMap{Data: map[string]any{"count": int64(2), "seed": "one"}}},
			},
			Resources: []fleet.BundleResource{
				{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: large\nversion: 0.1.0\n"},
				{Name: "chart/templates/big.yaml", Content: bigTemplates},
				{Name: "chart/files/blob.txt", Content: randomBase64(1, 600<<10)},
			},
			Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"contents": "large"}}}},
		},
	}
	// Files the templates do not read: the input is large, the rendered
	// content not so much.
	for i := range 4 {
		b.Spec.Resources = append(b.Spec.Resources, fleet.BundleResource{Name: fmt.Sprintf("chart/data/%d.txt", i), Content: randomBase64(uint64(10+i), 600<<10)})
	}
	deployed := func(seed, blob string) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, "seed "+seed+" deployed and the Bundle Ready", func() error {
			for i := range 2 {
				cm, err := configMap(t, ds, appNS, "big-"+strconv.Itoa(i))
				if err != nil {
					return fmt.Errorf("%w (Bundle: %s)", err, conditionsOf(bundleStatus(t, ws, "large").Status.Conditions))
				}
				if cm.Data["seed"] != seed || cm.Data["blob"] != blob {
					return fmt.Errorf("big-%d has seed %q", i, cm.Data["seed"])
				}
			}
			if got := bundleStatus(t, ws, "large"); got.Status.Display.ReadyClusters != "1/1" {
				return fmt.Errorf("readyClusters %q (%s)", got.Status.Display.ReadyClusters, conditionsOf(got.Status.Conditions))
			}
			return nil
		})
	}
	condition := func(want string, holds func(c *metav1.Condition) bool) {
		t.Helper()
		testenv.Eventually(t, time.Minute, want, func() error {
			got := bundleStatus(t, ws, "large")
			for _, ty := range []string{fleet.ReadyCondition, "Reconciling", "Stalled"} {
				if c := meta.FindStatusCondition(got.Status.Conditions, ty); c != nil && holds(c) {
					return nil
				}
			}
			return fmt.Errorf("conditions %s", conditionsOf(got.Status.Conditions))
		})
	}

	// The first chunk is written after the Bundle: WaitingForContents,
	// naming it, then deployed once it is there.
	split, secrets, held := writeLarge(t, b, 0)
	var gz int
	for _, s := range secrets {
		gz += len(s.Data[bundlecontent.KeyChunk])
	}
	if gz <= 3<<19 {
		t.Fatalf("the contents gzip to %d bytes; the test wants more than 1.5 MiB", gz)
	}
	t.Logf("contents: %d bytes gzipped in %d Secrets", gz, len(secrets))
	condition("WaitingForContents naming the missing chunk", func(c *metav1.Condition) bool {
		return c.Type == "Reconciling" && c.Status == metav1.ConditionTrue && c.Reason == fleet.WaitingForContentsReason && strings.Contains(c.Message, held[0].Name)
	})
	live := &fleet.Bundle{}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), live); err != nil {
		t.Fatal(err)
	}
	late := held[0].DeepCopy()
	late.OwnerReferences = []metav1.OwnerReference{{APIVersion: fleet.GroupVersion.String(), Kind: "Bundle", Name: live.Name, UID: live.UID}}
	if err := up.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	deployed("one", b.Spec.Resources[2].Content)
	if got := bundleStatus(t, ws, "large"); got.Status.ResourcesSHA256Sum != strings.TrimPrefix(split.Spec.ContentsID, "s-") {
		t.Errorf("status.resourcesSha256Sum %q for contentsId %q", got.Status.ResourcesSHA256Sum, split.Spec.ContentsID)
	}

	// The agent's identity reads none of it: contents stay in the
	// workspace, and the cluster gets its BundleDeployment's content only.
	as := upstreamAs(t, ds, agentNS)
	if err := as.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: secrets[0].Name}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("cluster %s reading a contents chunk of its workspace: %v, want Forbidden", clusterName, err)
	}

	// Nor can a Bundle author copy them downstream: downstreamResources
	// naming the contents' index is refused before anything is written.
	copier := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "copier"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{
				DefaultNamespace:    appNS,
				DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: bundlecontent.ContentsSecretName("large", split.Spec.ContentsID)}},
			},
			Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: copier\n"}},
			Targets:   []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"contents": "large"}}}},
		},
	}
	if err := up.Create(t.Context(), copier); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "downstreamResources of the contents refused", func() error {
		got := bundleStatus(t, ws, "copier")
		c := meta.FindStatusCondition(got.Status.Conditions, "Stalled")
		if c == nil || c.Reason != bundle.DownstreamResourceInvalidReason || !strings.Contains(c.Message, bundlecontent.ContentsSecretName("large", split.Spec.ContentsID)) {
			return fmt.Errorf("conditions %s", conditionsOf(got.Status.Conditions))
		}
		return nil
	})
	bds := &fleet.BundleDeploymentList{}
	if err := up.List(t.Context(), bds, client.MatchingLabels{fleet.BundleLabel: "copier", fleet.BundleNamespaceLabel: ws}); err != nil || len(bds.Items) != 0 {
		t.Errorf("%d BundleDeployments of the copier (%v)", len(bds.Items), err)
	}
	if err := up.Delete(t.Context(), copier); err != nil {
		t.Fatal(err)
	}

	// A new version: new contents, the old ones deleted by the writer.
	b.Spec.Helm.Values.Data["seed"] = "two"
	b.Spec.Resources[2].Content = randomBase64(2, 600<<10)
	split2, _, _ := writeLarge(t, b)
	deployed("two", b.Spec.Resources[2].Content)
	left := &corev1.SecretList{}
	if err := up.List(t.Context(), left, client.InNamespace(ws), client.MatchingLabels{bundlecontent.ContentsLabel: "true", fleet.BundleLabel: "large"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range left.Items {
		if s.Annotations[bundlecontent.ContentsIDAnnotation] != split2.Spec.ContentsID && s.DeletionTimestamp.IsZero() {
			t.Errorf("Secret %s of the contents before is left", s.Name)
		}
	}

	// A chunk changed behind the writer's back (delete and create, it is
	// immutable), labels and annotations kept; the next render (a change
	// of values) reads it: ContentsInvalid naming it, the deployment in
	// force stays.
	chunk := bundlecontent.ContentsChunkName("large", split2.Spec.ContentsID, 1)
	orig := &corev1.Secret{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: chunk}, orig); err != nil {
		t.Fatal(err)
	}
	if err := up.Delete(t.Context(), orig); err != nil {
		t.Fatal(err)
	}
	forged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: chunk, Labels: orig.Labels, Annotations: orig.Annotations, OwnerReferences: orig.OwnerReferences},
		Type:       orig.Type, Immutable: orig.Immutable, Data: map[string][]byte{bundlecontent.KeyChunk: append([]byte(nil), orig.Data[bundlecontent.KeyChunk]...)},
	}
	forged.Data[bundlecontent.KeyChunk][4096] ^= 0x55
	testenv.Eventually(t, 30*time.Second, "the forged chunk created", func() error { return up.Create(t.Context(), forged) })
	updateBundle(t, ws, "large", func(b *fleet.Bundle) { b.Spec.Helm.Values.Data["seed"] = "three" })
	condition("ContentsInvalid naming the changed chunk", func(c *metav1.Condition) bool {
		return c.Type == "Stalled" && c.Status == metav1.ConditionTrue && c.Reason == fleet.ContentsInvalidReason &&
			strings.Contains(c.Message, chunk) && strings.Contains(c.Message, "does not match its digest")
	})
	if cm, err := configMap(t, ds, appNS, "big-0"); err != nil || cm.Data["seed"] != "two" {
		t.Errorf("big-0 after the refusal: %v (seed %v)", err, cm)
	}
	// The writer writes it again (delete the forged one, write the Bundle
	// again): seed three deploys.
	if err := up.Delete(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	b.Spec.Helm.Values.Data["seed"] = "three"
	testenv.Eventually(t, 30*time.Second, "the Bundle written again", func() error {
		split3, secrets3, err := bundlecontents.Split(b, 0)
		if err != nil {
			return err
		}
		return bundlecontents.Write(t.Context(), up, split3, secrets3, func(ctx context.Context, nb *fleet.Bundle) error {
			cur := &fleet.Bundle{}
			if err := up.Get(ctx, client.ObjectKeyFromObject(nb), cur); err != nil {
				return err
			}
			cur.Spec = nb.Spec
			return up.Update(ctx, cur)
		})
	})
	deployed("three", b.Spec.Resources[2].Content)

	// The Bundle deleted: its contents go with it.
	if err := up.Delete(t.Context(), &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "large"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "contents collected with the Bundle", func() error {
		list := &corev1.SecretList{}
		if err := up.List(t.Context(), list, client.InNamespace(ws), client.MatchingLabels{bundlecontent.ContentsLabel: "true", fleet.BundleLabel: "large"}); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d contents Secrets left", len(list.Items))
		}
		return nil
	})
}
