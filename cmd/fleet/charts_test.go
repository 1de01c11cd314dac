package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestFleetChart_ConfigIsAcceptedByTheController keeps charts/fleet and the
// controller's config parser in step: every value the chart writes must be
// one the controller reads.
func TestFleetChart_ConfigIsAcceptedByTheController(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	values := []byte(`apiServerURL: https://fleet.example.com:6443
apiServerCA: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
agent:
  tlsMode: strict
  checkinInterval: 45s
  imagePullSecrets: [regcred]
  proxy: {httpsProxy: "http://proxy:3128"}
registrationTokenTTL: {required: true}
capi: {namespaces: [capi-system], clusterSelector: "fleet=enabled"}
insecureKubeconfig: {exec: true, proxy: true}
kubeConfigSecretNamespaces: {team-a: [shared-kubeconfigs]}
`)
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: values})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var cm *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == config.ConfigMapName {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("charts/fleet renders no fleet-controller ConfigMap")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", config.ConfigMapKey)
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("the controller rejects the chart's config: %v\n%s", err, data)
	}
	if cfg.GetAgentTLSMode() != "strict" || cfg.GetAgentCheckinInterval().String() != "45s" ||
		string(cfg.APIServerCA) != "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" ||
		!cfg.RegistrationTokenTTLRequired || cfg.AgentProxy.HTTPSProxy != "http://proxy:3128" ||
		len(cfg.AgentImagePullSecrets) != 1 || cfg.GetAgentImage() != "gitops-fleet/fleet:0.1.0" ||
		!cfg.CAPISelects("capi-system", map[string]string{"fleet": "enabled"}) || cfg.CAPISelects("other", map[string]string{"fleet": "enabled"}) ||
		!cfg.InsecureKubeconfig.Exec || !cfg.InsecureKubeconfig.Proxy || cfg.InsecureKubeconfig.Files || cfg.InsecureKubeconfig.TLS ||
		!cfg.KubeConfigSecretNamespaceAllowed("team-a", "shared-kubeconfigs") || cfg.AllowInsecureAPIServerURL {
		t.Errorf("config lost values: %+v", cfg)
	}
}

// TestFleetChart_ControllerRBACIsTheReviewedList: the controller's rights
// are reviewed rule by rule (each has a comment in the template saying what
// for). Any change to them must change this list too, in the same review.
// That the rules suffice is proved elsewhere: the controller's envtest
// suites run as exactly this identity.
func TestFleetChart_ControllerRBACIsTheReviewedList(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	want := map[string][]rbacv1.PolicyRule{
		"ClusterRole/fleet-controller": {
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters", "clusterregistrations", "clusterregistrationtokens", "bundles", "bundledeployments", "clustergroups"}, Verbs: all},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/status", "clusterregistrations/status", "clusterregistrationtokens/status", "bundles/status", "bundledeployments/status", "clustergroups/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
			{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}},
		},
		"Role/fleet-controller": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		},
	}
	got := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		var r rbacv1.ClusterRole // Role has the same rules field
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		got[o.GetKind()+"/"+o.GetName()] = r.Rules
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the controller's RBAC is not the reviewed list (-reviewed +rendered):\n%s", diff)
	}
}
