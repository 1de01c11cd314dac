package admission

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gitops-fleet/fleet/kustomize/base/policies"
)

// shipped is a policy and binding as a file of kustomize/base/policies
// writes them.
func shipped() []policies.Object {
	return []policies.Object{
		{Kind: policies.KindPolicy, Name: "p", Spec: map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"fleet.cattle.io"}, "apiVersions": []any{"v1alpha1"},
				"operations": []any{"CREATE"}, "resources": []any{"clusterregistrations"},
			}}},
			"validations": []any{map[string]any{"expression": "true", "message": "m", "reason": "Forbidden"}},
		}},
		{Kind: policies.KindBinding, Name: "p", Spec: map[string]any{"policyName": "p", "validationActions": []any{"Deny"}}},
	}
}

// installed is what the API server returns for them: the typed objects with
// the defaults it fills in.
func installed() (*admissionv1.ValidatingAdmissionPolicySpec, *admissionv1.ValidatingAdmissionPolicyBindingSpec) {
	reason := metav1.StatusReasonForbidden
	return &admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionv1.Equivalent),
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{
						APIGroups: []string{"fleet.cattle.io"}, APIVersions: []string{"v1alpha1"},
						Resources: []string{"clusterregistrations"}, Scope: ptr.To(admissionv1.AllScopes),
					},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: "true", Message: "m", Reason: &reason}},
		}, &admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "p", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		}
}

func TestCompare(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*admissionv1.ValidatingAdmissionPolicySpec, *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool
		want   []string
	}{
		"as shipped, with API defaults": {},
		"binding missing": {
			change: func(_ *admissionv1.ValidatingAdmissionPolicySpec, _ *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				return false
			},
			want: []string{"not installed: ValidatingAdmissionPolicyBinding p"},
		},
		"expression changed": {
			change: func(p *admissionv1.ValidatingAdmissionPolicySpec, _ *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				p.Validations[0].Expression = "false || true"
				return true
			},
			want: []string{"changed from what fleet ships: ValidatingAdmissionPolicy p (spec.validations[0].expression)"},
		},
		"validation removed": {
			change: func(p *admissionv1.ValidatingAdmissionPolicySpec, _ *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				p.Validations = nil
				return true
			},
			want: []string{"ValidatingAdmissionPolicy p (spec.validations)"},
		},
		"failure policy Ignore": {
			change: func(p *admissionv1.ValidatingAdmissionPolicySpec, _ *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				p.FailurePolicy = ptr.To(admissionv1.Ignore)
				return true
			},
			want: []string{"(spec.failurePolicy)"},
		},
		"namespace selector narrowed": {
			change: func(p *admissionv1.ValidatingAdmissionPolicySpec, _ *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				p.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
				return true
			},
			want: []string{"(spec.matchConstraints.namespaceSelector)"},
		},
		"binding audits only": {
			change: func(_ *admissionv1.ValidatingAdmissionPolicySpec, b *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				b.ValidationActions = []admissionv1.ValidationAction{admissionv1.Audit}
				return true
			},
			want: []string{"ValidatingAdmissionPolicyBinding p (spec.validationActions[0])"},
		},
		"binding scoped down": {
			change: func(_ *admissionv1.ValidatingAdmissionPolicySpec, b *admissionv1.ValidatingAdmissionPolicyBindingSpec) bool {
				b.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"only": "this"}}}
				return true
			},
			want: []string{"ValidatingAdmissionPolicyBinding p (spec.matchResources)"},
		},
	} {
		p, b := installed()
		objs := map[string]any{"ValidatingAdmissionPolicy/p": p, "ValidatingAdmissionPolicyBinding/p": b}
		if tc.change != nil && !tc.change(p, b) {
			delete(objs, "ValidatingAdmissionPolicyBinding/p")
		}
		got := Compare(shipped(), objs)
		if len(tc.want) == 0 {
			if got != "" {
				t.Errorf("%s: %s", name, got)
			}
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", name, got, w)
			}
		}
		if !strings.Contains(got, "kubectl apply --server-side -k kustomize/base") {
			t.Errorf("%s: %q does not say how to fix it", name, got)
		}
	}
}

func TestNew_LoadsTheShippedPolicies(t *testing.T) {
	c, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Problem(), "not yet read") {
		t.Errorf("before the first check: %q", c.Problem())
	}
	if c.ReadyCheck(nil) == nil {
		t.Error("ready before the first check")
	}
	names := map[string]bool{}
	for _, o := range c.want {
		names[o.String()] = true
	}
	for _, n := range []string{"ValidatingAdmissionPolicy/fleet-clusterregistration-token", "ValidatingAdmissionPolicyBinding/fleet-clusterregistration-approval"} {
		if !names[n] {
			t.Errorf("%s is not checked: %v", n, names)
		}
	}
}
