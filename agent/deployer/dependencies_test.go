package deployer

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// depBD is a BundleDeployment of Bundle name (workspace ws) in a cluster
// namespace, in state st, with the Bundle's labels and dependsOn.
func depBD(ws, name string, st fleet.BundleState, labels map[string]string, deps ...fleet.BundleRef) fleet.BundleDeployment {
	l := map[string]string{fleet.BundleLabel: name, fleet.BundleNamespaceLabel: ws}
	for k, v := range labels {
		l[k] = v
	}
	bd := fleet.BundleDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-ns", Name: name, Labels: l},
		Spec:       fleet.BundleDeploymentSpec{DeploymentID: "m:o", DependsOn: deps},
	}
	switch st {
	case fleet.Ready:
		bd.Status = fleet.BundleDeploymentStatus{AppliedDeploymentID: "m:o", Ready: true, NonModified: true}
	case fleet.NotReady:
		bd.Status = fleet.BundleDeploymentStatus{AppliedDeploymentID: "m:o", NonModified: true}
	case fleet.Modified:
		bd.Status = fleet.BundleDeploymentStatus{AppliedDeploymentID: "m:o", Ready: true}
	case fleet.WaitApplied:
	}
	return bd
}

func outcome(t *testing.T, bd fleet.BundleDeployment, all ...fleet.BundleDeployment) (kind reconciler.Kind, reason, msg string) {
	t.Helper()
	err := dependencyOutcome(&bd, append(all, bd))
	if err == nil {
		return reconciler.KindSucceeded, "", ""
	}
	out := reconciler.Failure(err)
	switch out.Kind() {
	case reconciler.KindWaiting:
		return out.Kind(), out.Waiting().Reason, err.Error()
	case reconciler.KindStalled:
		return out.Kind(), out.Stalled().Reason, err.Error()
	}
	return out.Kind(), "", err.Error()
}

func TestDependencies_NameSelectorAndAcceptedStates(t *testing.T) {
	db := depBD("ws", "db", fleet.NotReady, map[string]string{"tier": "db"})
	cache := depBD("ws", "cache", fleet.Ready, map[string]string{"tier": "db"})
	otherWS := depBD("other", "db", fleet.Ready, map[string]string{"tier": "db"})
	byName := fleet.BundleRef{Name: "db"}
	bySelector := fleet.BundleRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}}

	for _, tc := range []struct {
		name     string
		refs     []fleet.BundleRef
		all      []fleet.BundleDeployment
		kind     reconciler.Kind
		reason   string
		contains []string
	}{
		{"by name, not Ready", []fleet.BundleRef{byName}, []fleet.BundleDeployment{db, otherWS}, reconciler.KindWaiting, WaitingForDependencyReason,
			[]string{"dependent bundle(s) are not ready: [db]", "db is NotReady (accepted: Ready)"}},
		{"by name, Ready", []fleet.BundleRef{byName}, []fleet.BundleDeployment{depBD("ws", "db", fleet.Ready, nil)}, reconciler.KindSucceeded, "", nil},
		{"by name, another workspace's Bundle does not count", []fleet.BundleRef{byName}, []fleet.BundleDeployment{otherWS}, reconciler.KindWaiting, WaitingForDependencyReason,
			[]string{"db is not deployed to this cluster"}},
		{"selector, one of two not Ready", []fleet.BundleRef{bySelector}, []fleet.BundleDeployment{db, cache}, reconciler.KindWaiting, WaitingForDependencyReason,
			[]string{"[db]"}},
		{"selector, nothing matches", []fleet.BundleRef{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "queue"}}}}, []fleet.BundleDeployment{db}, reconciler.KindWaiting, WaitingForDependencyReason,
			[]string{`no Bundle matching "tier=queue" is deployed to this cluster`}},
		{"acceptedStates", []fleet.BundleRef{{Name: "db", AcceptedStates: []fleet.BundleState{fleet.Ready, fleet.NotReady}}}, []fleet.BundleDeployment{db}, reconciler.KindSucceeded, "", nil},
		{"acceptedStates, WaitApplied not accepted", []fleet.BundleRef{{Name: "db", AcceptedStates: []fleet.BundleState{fleet.Ready, fleet.NotReady}}},
			[]fleet.BundleDeployment{depBD("ws", "db", fleet.WaitApplied, nil)}, reconciler.KindWaiting, WaitingForDependencyReason, []string{"db is WaitApplied (accepted: Ready, NotReady)"}},
		{"empty ref skipped, as Fleet", []fleet.BundleRef{{}}, nil, reconciler.KindSucceeded, "", nil},
		{"invalid selector", []fleet.BundleRef{{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}}}, nil,
			reconciler.KindStalled, fleet.ApplyFailedReason, []string{"dependsOn[0].selector is not a valid label selector"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := depBD("ws", "app", fleet.WaitApplied, nil, tc.refs...)
			kind, reason, msg := outcome(t, app, tc.all...)
			if kind != tc.kind || reason != tc.reason {
				t.Fatalf("%v %s %q, want %v %s", kind, reason, msg, tc.kind, tc.reason)
			}
			for _, c := range tc.contains {
				if !strings.Contains(msg, c) {
					t.Errorf("message %q does not say %q", msg, c)
				}
			}
		})
	}
}

func TestDependencies_CycleIsReported(t *testing.T) {
	a := depBD("ws", "a", fleet.WaitApplied, nil, fleet.BundleRef{Name: "b"})
	b := depBD("ws", "b", fleet.WaitApplied, nil, fleet.BundleRef{Name: "c"})
	c := depBD("ws", "c", fleet.WaitApplied, nil, fleet.BundleRef{Name: "a"})
	kind, reason, msg := outcome(t, a, b, c)
	if kind != reconciler.KindStalled || reason != DependencyCycleReason || !strings.Contains(msg, "a → b → c → a") {
		t.Fatalf("%v %s %q", kind, reason, msg)
	}
	// A selector that matches the Bundle itself is a cycle of one.
	self := depBD("ws", "self", fleet.WaitApplied, map[string]string{"team": "x"}, fleet.BundleRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}})
	if kind, reason, msg := outcome(t, self); kind != reconciler.KindStalled || reason != DependencyCycleReason || !strings.Contains(msg, "self → self") {
		t.Fatalf("%v %s %q", kind, reason, msg)
	}
	// A cycle that does not hold it up is not reported: b waits for c,
	// which waits for b, but a depends only on a Ready d.
	d := depBD("ws", "d", fleet.Ready, nil)
	a2 := depBD("ws", "a", fleet.WaitApplied, nil, fleet.BundleRef{Name: "d"})
	b2 := depBD("ws", "b", fleet.WaitApplied, nil, fleet.BundleRef{Name: "c"})
	c2 := depBD("ws", "c", fleet.WaitApplied, nil, fleet.BundleRef{Name: "b"})
	if kind, _, msg := outcome(t, a2, b2, c2, d); kind != reconciler.KindSucceeded {
		t.Fatalf("%v %q", kind, msg)
	}
	// One that waits behind a cycle it is not part of waits, naming the
	// first Bundle of it; that one reports the cycle.
	e := depBD("ws", "e", fleet.WaitApplied, nil, fleet.BundleRef{Name: "b"})
	if kind, reason, msg := outcome(t, e, b2, c2); kind != reconciler.KindWaiting || reason != WaitingForDependencyReason || !strings.Contains(msg, "b is WaitApplied") {
		t.Fatalf("%v %s %q", kind, reason, msg)
	}
}

func TestWithoutIgnoredConditions(t *testing.T) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`apiVersion: example.com/v1
kind: Gate
metadata: {name: g, generation: 1}
status:
  observedGeneration: 1
  conditions:
  - {type: Ready, status: "False", reason: Waiting}
  - {type: Synced, status: "True", observedGeneration: 1}
`), &u.Object); err != nil {
		t.Fatal(err)
	}
	conds := func(o *unstructured.Unstructured) int {
		c, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		return len(c)
	}
	for _, tc := range []struct {
		name   string
		ignore *fleet.IgnoreOptions
		left   int
	}{
		{"none", nil, 2},
		{"empty ignore, as fleet apply writes it", &fleet.IgnoreOptions{}, 2},
		{"every key and value must match", &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "Ready", "status": "True"}}}, 2},
		{"Ready False", &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "Ready", "status": "False"}}}, 1},
		{"one of several maps; numbers as text", &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "X"}, {"type": "Synced", "observedGeneration": "1"}}}, 1},
		{"a key the condition lacks", &fleet.IgnoreOptions{Conditions: []map[string]string{{"type": "Ready", "message": "x"}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := withoutIgnoredConditions(u, tc.ignore)
			if conds(got) != tc.left {
				t.Errorf("%d conditions left, want %d", conds(got), tc.left)
			}
			if conds(u) != 2 {
				t.Fatal("the input was changed")
			}
		})
	}
}
