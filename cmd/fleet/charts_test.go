package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

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
agentLabelKeys: [env, "example.com/*"]
bundleRendering: {maxSize: 64Mi, timeout: 1m, concurrency: 4}
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
	// Set values, and the chart's defaults, which are the controller's.
	if cfg.GetBundleMaxSize() != 64<<20 || cfg.GetBundleRenderTimeout().String() != "1m0s" || cfg.GetBundleRenderConcurrency() != 4 ||
		cfg.GetBundleMaxResourceSize() != config.DefaultBundleMaxResourceSize || cfg.GetBundleRenderMemoryLimit() != config.DefaultBundleRenderMemoryLimit {
		t.Errorf("bundle rendering limits: %s", data)
	}
	if !cfg.AgentLabelKeyAllowed("example.com/region") || cfg.AgentLabelKeyAllowed("region") {
		t.Errorf("agentLabelKeys lost: %v", cfg.AgentLabelKeys)
	}
}

// The approver and registration-admin ClusterRoles carry the verbs the
// admission policies ask the authorizer about, and are bound to the groups
// of the chart values only (none by default).
func TestFleetChart_RegistrationRoles(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values   string
		bindings map[string][]string
	}{
		{values: "", bindings: map[string][]string{}},
		{
			values: "registrationApprovers: {groups: [ops, sre]}\nregistrationAdmins: {groups: [platform]}\n",
			bindings: map[string][]string{
				"fleet-registration-approver": {"ops", "sre"},
				"fleet-registration-admin":    {"platform"},
			},
		},
	} {
		out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: []byte(tc.values)})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		verbs := map[string][]string{}
		bindings := map[string][]string{}
		for _, o := range objs {
			switch o.GetKind() {
			case "ClusterRole":
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				for _, r := range rules {
					rule := r.(map[string]any)
					if res, _ := rule["resources"].([]any); len(res) == 1 && res[0] == "clusterregistrations" {
						for _, v := range rule["verbs"].([]any) {
							verbs[o.GetName()] = append(verbs[o.GetName()], v.(string))
						}
					}
				}
			case "ClusterRoleBinding":
				if strings.HasPrefix(o.GetName(), "fleet-controller") || strings.HasPrefix(o.GetName(), "fleet-proxy") || o.GetName() == "fleet-gitops" {
					continue // checked by TestFleetChart_ControllerRBACIsTheReviewedList, TestFleetChart_BootstrapIdentity, TestFleetChart_ProxyRBACIsTheReviewedList and TestFleetChart_GitopsRBACIsTheReviewedList
				}
				subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				for _, s := range subjects {
					bindings[o.GetName()] = append(bindings[o.GetName()], s.(map[string]any)["name"].(string))
				}
			}
		}
		if !slices.Contains(verbs["fleet-registration-approver"], "approve") || slices.Contains(verbs["fleet-registration-approver"], "register") ||
			!slices.Contains(verbs["fleet-registration-admin"], "register") || slices.Contains(verbs["fleet-registration-admin"], "approve") {
			t.Errorf("verbs on clusterregistrations: %v", verbs)
		}
		if !reflect.DeepEqual(bindings, tc.bindings) {
			t.Errorf("values %q: bindings %v, want %v", tc.values, bindings, tc.bindings)
		}
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
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters", "clusterregistrations", "clusterregistrationtokens", "bundles", "bundledeployments", "clustergroups", "agentrollouts"}, Verbs: all},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/status", "clusterregistrations/status", "clusterregistrationtokens/status", "bundles/status", "bundledeployments/status", "clustergroups/status", "agentrollouts/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: all},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
			{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"proxy.fleet.cattle.io"}, Resources: []string{"clusters/attach", "clusters/revocations"}, Verbs: []string{"get"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, Verbs: []string{"get", "list", "watch"}},
		},
		"Role/fleet-controller": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list"}},
		},
	}
	got := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if (o.GetKind() != "ClusterRole" && o.GetKind() != "Role") || o.GetName() != "fleet-controller" {
			continue // the roles for users are checked by TestFleetChart_RegistrationRoles
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

// TestFleetChart_ProxyRBACIsTheReviewedList: fleet-proxy's rights and the
// two ClusterRoles for users (docs/design/cluster-access.md, "API group and
// rights"), rule by rule.
func TestFleetChart_ProxyRBACIsTheReviewedList(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: []byte("proxy: {enabled: true, endpoint: {enabled: true, url: \"https://fleet-proxy.example.com\"}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	write := []string{"get", "create", "update", "patch", "delete"}
	wantRules := map[string][]rbacv1.PolicyRule{
		"ClusterRole/fleet-proxy-entry": {
			{APIGroups: []string{"proxy.fleet.cattle.io"}, Resources: []string{"clusters/proxy"}, Verbs: write},
			{APIGroups: []string{"proxy.fleet.cattle.io"}, Resources: []string{"signingkeys"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"proxy.fleet.cattle.io"}, Resources: []string{"clusters/token"}, Verbs: []string{"create"}},
		},
		"ClusterRole/fleet-cluster-proxy": {
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/proxy"}, Verbs: write},
		},
		"ClusterRole/fleet-proxy": {
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, ResourceNames: []string{"v1alpha1.proxy.fleet.cattle.io"}, Verbs: []string{"get", "patch"}},
			// The identity mapping of agents' attach requests (read-only).
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusterregistrations", "clusters"}, Verbs: []string{"get", "list", "watch"}},
			// A direct token dies with the pod its holder's token was
			// bound to (metadata, by name).
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			// The Connected condition (one condition, server-side apply)
			// and the tunnel events on Clusters.
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"clusters/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
		"Role/fleet-proxy": {
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fleet-proxy-tls", "fleet-proxy-peer"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			// The signing key Secret of earlier releases, deleted at start.
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fleet-proxy-signing"}, Verbs: []string{"delete"}},
			// The replicas' public signing keys (one ConfigMap).
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"fleet-proxy-signing-keys"}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
			// Peer discovery: the endpoints of Service fleet-proxy.
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
			// The records of issued direct tokens (and the registries of
			// earlier releases, migrated).
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			// Whether the replica a Connected=True names still runs.
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		},
		// fleet-proxy's endpoint (kube-public): every authenticated user
		// reads where it is; fleet-proxy writes its CA there, nothing else.
		"Role/fleet-proxy-endpoint-reader": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"fleet-proxy-endpoint"}, Verbs: []string{"get"}},
		},
		"Role/fleet-proxy-endpoint-writer": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"fleet-proxy-endpoint"}, Verbs: []string{"get", "patch"}},
		},
	}
	wantBindings := map[string]string{
		"ClusterRoleBinding/fleet-proxy-entry":                              "ClusterRole/fleet-proxy-entry -> Group/system:authenticated",
		"ClusterRoleBinding/fleet-proxy":                                    "ClusterRole/fleet-proxy -> ServiceAccount/cattle-fleet-system/fleet-proxy",
		"ClusterRoleBinding/fleet-proxy:auth-delegator":                     "ClusterRole/system:auth-delegator -> ServiceAccount/cattle-fleet-system/fleet-proxy",
		"RoleBinding/fleet-proxy":                                           "Role/fleet-proxy -> ServiceAccount/cattle-fleet-system/fleet-proxy",
		"RoleBinding/fleet-proxy:extension-apiserver-authentication-reader": "Role/extension-apiserver-authentication-reader -> ServiceAccount/cattle-fleet-system/fleet-proxy",
		"RoleBinding/fleet-proxy-endpoint-reader":                           "Role/fleet-proxy-endpoint-reader -> Group/system:authenticated",
		"RoleBinding/fleet-proxy-endpoint-writer":                           "Role/fleet-proxy-endpoint-writer -> ServiceAccount/cattle-fleet-system/fleet-proxy",
	}
	gotRules := map[string][]rbacv1.PolicyRule{}
	gotBindings := map[string]string{}
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetName()
		switch o.GetKind() {
		case "ClusterRole", "Role":
			if _, ok := wantRules[key]; !ok {
				continue
			}
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			gotRules[key] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			if !strings.HasPrefix(o.GetName(), "fleet-proxy") {
				continue
			}
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			var subjects []string
			for _, s := range b.Subjects {
				if s.Namespace != "" {
					subjects = append(subjects, s.Kind+"/"+s.Namespace+"/"+s.Name)
				} else {
					subjects = append(subjects, s.Kind+"/"+s.Name)
				}
			}
			gotBindings[key] = b.RoleRef.Kind + "/" + b.RoleRef.Name + " -> " + strings.Join(subjects, ",")
		}
	}
	if diff := cmp.Diff(wantRules, gotRules); diff != "" {
		t.Errorf("fleet-proxy's roles are not the reviewed list (-reviewed +rendered):\n%s", diff)
	}
	if diff := cmp.Diff(wantBindings, gotBindings); diff != "" {
		t.Errorf("fleet-proxy's bindings are not the reviewed list (-reviewed +rendered):\n%s", diff)
	}
}

// TestFleetChart_BootstrapIdentity: the local cluster's credential
// (docs/operations.md, "The local cluster") belongs to ServiceAccount
// fleet-controller-bootstrap, bound to cluster-admin and to nothing else,
// which no pod mounts; with bootstrap.enabled false neither is rendered and
// the controller is told so. The bootstrap values reach the controller's
// configuration.
func TestFleetChart_BootstrapIdentity(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values  string
		enabled bool
		ns      string
		agentNS string
	}{
		{values: "", enabled: true, ns: "fleet-local", agentNS: "cattle-fleet-system"},
		{values: "bootstrap: {namespace: mgmt, agentNamespace: cattle-fleet-local-system}\n", enabled: true, ns: "mgmt", agentNS: "cattle-fleet-local-system"},
		{values: "bootstrap: {enabled: false}\n", enabled: false, ns: "fleet-local", agentNS: "cattle-fleet-system"},
	} {
		out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: []byte(tc.values)})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var cfg *config.Config
		for _, o := range objs {
			switch {
			case o.GetKind() == "ConfigMap" && o.GetName() == config.ConfigMapName:
				data, _, _ := unstructured.NestedString(o.Object, "data", config.ConfigMapKey)
				if cfg, err = config.Parse([]byte(data)); err != nil {
					t.Fatal(err)
				}
			case o.GetKind() == "ServiceAccount" && o.GetName() == "fleet-controller-bootstrap":
				automount, found, _ := unstructured.NestedBool(o.Object, "automountServiceAccountToken")
				got = append(got, fmt.Sprintf("ServiceAccount/%s/%s automount=%v", o.GetNamespace(), o.GetName(), !found || automount))
			case o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding":
				var b rbacv1.ClusterRoleBinding
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
					t.Fatal(err)
				}
				for _, s := range b.Subjects {
					if s.Name == "fleet-controller-bootstrap" || o.GetName() == "fleet-controller-bootstrap" {
						got = append(got, fmt.Sprintf("%s/%s: %s/%s -> %s/%s/%s", o.GetKind(), o.GetName(), b.RoleRef.Kind, b.RoleRef.Name, s.Kind, s.Namespace, s.Name))
					}
				}
			}
		}
		var want []string
		if tc.enabled {
			want = []string{
				"ServiceAccount/cattle-fleet-system/fleet-controller-bootstrap automount=false",
				"ClusterRoleBinding/fleet-controller-bootstrap: ClusterRole/cluster-admin -> ServiceAccount/cattle-fleet-system/fleet-controller-bootstrap",
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("values %q: the bootstrap identity is not the reviewed one (-reviewed +rendered):\n%s", tc.values, diff)
		}
		if cfg == nil || cfg.BootstrapEnabled() != tc.enabled || cfg.GetBootstrapNamespace() != tc.ns || cfg.GetBootstrapAgentNamespace() != tc.agentNS {
			t.Errorf("values %q: the controller's bootstrap configuration is %+v", tc.values, cfg)
		}
	}
}

// TestFleetChart_RendererHoldsNoCredentialAndReachesOnlyTheController: the
// renderer Deployment (docs/operations.md, "Bundle rendering") mounts no
// ServiceAccount token, is bound to no role, runs confined (non-root,
// read-only root, no capabilities, seccomp), mounts only the certificate,
// its key and the token's hash of Secret fleet-renderer-tls, and its
// NetworkPolicy denies all egress and all ingress but the controller's on
// its port; every controller shard is told its URL. renderer.enabled false
// renders none of it and the controller renders in its own pod.
func TestFleetChart_RendererHoldsNoCredentialAndReachesOnlyTheController(t *testing.T) {
	ch, err := renderer.LoadChartDir("../../charts/fleet")
	if err != nil {
		t.Fatal(err)
	}
	render := func(values string) []*unstructured.Unstructured {
		t.Helper()
		out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: "cattle-fleet-system", Values: []byte(values)})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := out.Objects()
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	var (
		dep          appsv1.Deployment
		sa           corev1.ServiceAccount
		svc          corev1.Service
		policy       networkingv1.NetworkPolicy
		found        = map[string]bool{}
		rendererURLs []string
	)
	objs := render("shards: 2\nrenderer: {port: 9443, concurrency: 3}\n")
	for _, o := range objs {
		into := map[string]any{
			"Deployment/fleet-renderer":     &dep,
			"ServiceAccount/fleet-renderer": &sa,
			"Service/fleet-renderer":        &svc,
			"NetworkPolicy/fleet-renderer":  &policy,
		}[o.GetKind()+"/"+o.GetName()]
		if into != nil {
			found[o.GetKind()] = true
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatal(err)
			}
		}
		if o.GetKind() == "Deployment" && strings.HasPrefix(o.GetName(), "fleet-controller") {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if u, ok := strings.CutPrefix(a, "--renderer-url="); ok {
					rendererURLs = append(rendererURLs, d.Name+" "+u)
				}
			}
		}
		if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if s.(map[string]any)["name"] == "fleet-renderer" {
					t.Errorf("%s/%s binds the renderer's ServiceAccount to a role", o.GetKind(), o.GetName())
				}
			}
		}
	}
	if len(found) != 4 {
		t.Fatalf("rendered %v of the renderer's Deployment, ServiceAccount, Service and NetworkPolicy", found)
	}

	pod := dep.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken ||
		pod.ServiceAccountName != "fleet-renderer" {
		t.Errorf("a ServiceAccount token would be mounted: pod automount %v, ServiceAccount %s automount %v",
			ptr.Deref(pod.AutomountServiceAccountToken, true), pod.ServiceAccountName, ptr.Deref(sa.AutomountServiceAccountToken, true))
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container security context %+v", sc)
	}
	// --bundle-max-size: the largest render request follows bundleMaxSize.
	if want := []string{"renderer", "--listen=:9443", "--credentials-dir=/etc/fleet-renderer", "--concurrency=3", "--bundle-max-size=32Mi", "--log-level=info"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	var mounted []string
	for _, v := range pod.Volumes {
		switch {
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				mounted = append(mounted, v.Secret.SecretName+"/"+it.Key)
			}
			if len(v.Secret.Items) == 0 {
				mounted = append(mounted, v.Secret.SecretName+"/*")
			}
		case v.Projected != nil, v.HostPath != nil:
			t.Errorf("volume %s: projected or host path", v.Name)
		}
	}
	if want := []string{"fleet-renderer-tls/tls.crt", "fleet-renderer-tls/tls.key", "fleet-renderer-tls/token.sha256"}; !slices.Equal(mounted, want) {
		t.Errorf("mounted %v, want only %v (never the token itself)", mounted, want)
	}

	ingress := policy.Spec.Ingress
	if !slices.Equal(policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		!reflect.DeepEqual(policy.Spec.PodSelector.MatchLabels, map[string]string{"app": "fleet-renderer"}) ||
		len(policy.Spec.Egress) != 0 || len(ingress) != 1 || len(ingress[0].From) != 1 || len(ingress[0].Ports) != 1 ||
		ingress[0].From[0].PodSelector == nil || ingress[0].From[0].NamespaceSelector != nil || ingress[0].From[0].IPBlock != nil ||
		!reflect.DeepEqual(ingress[0].From[0].PodSelector.MatchLabels, map[string]string{"app": "fleet-controller"}) ||
		ingress[0].Ports[0].Port == nil || ingress[0].Ports[0].Port.IntValue() != 9443 {
		t.Errorf("NetworkPolicy spec %+v: want no egress, ingress from app=fleet-controller on 9443 only", policy.Spec)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9443 || svc.Spec.Selector["app"] != "fleet-renderer" {
		t.Errorf("Service %+v", svc.Spec)
	}
	wantURLs := []string{
		"fleet-controller-shard-0 https://fleet-renderer.cattle-fleet-system.svc:9443",
		"fleet-controller-shard-1 https://fleet-renderer.cattle-fleet-system.svc:9443",
	}
	if !slices.Equal(rendererURLs, wantURLs) {
		t.Errorf("controllers told %v, want %v", rendererURLs, wantURLs)
	}

	for _, o := range render("renderer: {enabled: false}\n") {
		if strings.Contains(o.GetName(), "fleet-renderer") {
			t.Errorf("renderer.enabled false renders %s/%s", o.GetKind(), o.GetName())
		}
		if o.GetKind() == "Deployment" && strings.Contains(fmt.Sprint(o.Object), "--renderer-url") {
			t.Errorf("renderer.enabled false: %s is told a renderer URL", o.GetName())
		}
	}
}
