package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// gitopsObjects renders charts/fleet with values and decodes the objects of
// the source component (name fleet-gitops*).
type gitopsObjects struct {
	all        []*unstructured.Unstructured
	deployment *appsv1.Deployment
	policy     *networkingv1.NetworkPolicy
	services   map[string]*corev1.Service
	rules      map[string][]rbacv1.PolicyRule
	bindings   map[string]string
}

func renderGitops(t *testing.T, values string) gitopsObjects {
	t.Helper()
	g := gitopsObjects{services: map[string]*corev1.Service{}, rules: map[string][]rbacv1.PolicyRule{}, bindings: map[string]string{}}
	g.all = renderChart(t, "../../charts/fleet", "fleet", values)
	for _, o := range g.all {
		if !strings.HasPrefix(o.GetName(), "fleet-gitops") {
			continue
		}
		key := o.GetKind() + "/" + o.GetName()
		var into any
		switch o.GetKind() {
		case "Deployment":
			g.deployment = &appsv1.Deployment{}
			into = g.deployment
		case "NetworkPolicy":
			g.policy = &networkingv1.NetworkPolicy{}
			into = g.policy
		case "Service":
			s := &corev1.Service{}
			g.services[o.GetName()] = s
			into = s
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // Role has the same rules field
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			g.rules[key] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			var subjects []string
			for _, s := range b.Subjects {
				subjects = append(subjects, s.Kind+"/"+s.Namespace+"/"+s.Name)
			}
			g.bindings[key] = b.RoleRef.Kind + "/" + b.RoleRef.Name + " -> " + strings.Join(subjects, ",")
		}
		if into != nil {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatal(err)
			}
		}
	}
	return g
}

// TestFleetChart_GitopsRBACIsTheReviewedList: the source component's
// identity (docs/operations.md, "Who may do what", fleet-gitops) rule by
// rule (i30-controller's table in docs/operations.md): it reads GitRepos,
// restrictions, BundleDeployments and Clusters, writes GitRepo status,
// Bundles and the Secrets it stages, reads Secrets by name only (no list or
// watch: it cannot enumerate the Clusters' kubeconfig Secrets), and nothing of
// the controller's (Cluster writes, registrations, namespaces, RBAC,
// ServiceAccounts, TokenRequests). The controller's own roles do not
// grow for GitOps (TestFleetChart_ControllerRBACIsTheReviewedList).
func TestFleetChart_GitopsRBACIsTheReviewedList(t *testing.T) {
	g := renderGitops(t, "")
	read := []string{"get", "list", "watch"}
	want := map[string][]rbacv1.PolicyRule{
		"ClusterRole/fleet-gitops": {
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"gitrepos"}, Verbs: read},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"gitrepos/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"gitreporestrictions"}, Verbs: read},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundles"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
			{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundledeployments", "clusters"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "patch", "delete"}},
		},
		"Role/fleet-gitops": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: read},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	if diff := cmp.Diff(want, g.rules); diff != "" {
		t.Errorf("fleet-gitops' roles are not the reviewed list (-reviewed +rendered):\n%s", diff)
	}
	wantBindings := map[string]string{
		"ClusterRoleBinding/fleet-gitops": "ClusterRole/fleet-gitops -> ServiceAccount/cattle-fleet-system/fleet-gitops",
		"RoleBinding/fleet-gitops":        "Role/fleet-gitops -> ServiceAccount/cattle-fleet-system/fleet-gitops",
	}
	if diff := cmp.Diff(wantBindings, g.bindings); diff != "" {
		t.Errorf("fleet-gitops' bindings are not the reviewed list (-reviewed +rendered):\n%s", diff)
	}
	// No other binding names its ServiceAccount.
	for _, o := range g.all {
		if (o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding") && !strings.HasPrefix(o.GetName(), "fleet-gitops") {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if s.(map[string]any)["name"] == "fleet-gitops" {
					t.Errorf("%s/%s binds fleet-gitops too", o.GetKind(), o.GetName())
				}
			}
		}
	}
}

// TestFleetChart_GitopsDeployment: the source component runs as its own
// ServiceAccount, confined as the other components (non-root, read-only
// root, no capabilities, seccomp), with the flags of docs/operations.md, a
// cache volume bounded by gitops.cacheSize, probes, a webhook Service port
// 80 to the container's 8090, a metrics Service the ServiceMonitor selects,
// and a NetworkPolicy: ingress on the webhook, metrics and probe ports
// only; egress DNS, the API server's ports and git/chart hosts on 443, 22
// and the extra ports, to the CIDRs given. gitops.enabled false renders
// none of it.
func TestFleetChart_GitopsDeployment(t *testing.T) {
	g := renderGitops(t, "logLevel: debug\ngitops: {concurrency: 8, cacheSize: 2Gi, webhook: {service: {type: LoadBalancer, annotations: {example.com/lb: internal}}}, networkPolicy: {extraPorts: [3000], egressCIDRs: [10.0.0.0/8]}}\n")
	if g.deployment == nil || g.policy == nil || g.services["fleet-gitops-webhook"] == nil || g.services["fleet-gitops-metrics"] == nil {
		t.Fatalf("rendered Deployment %v, NetworkPolicy %v, Services %v", g.deployment != nil, g.policy != nil, g.services)
	}
	pod := g.deployment.Spec.Template.Spec
	if pod.ServiceAccountName != "fleet-gitops" {
		t.Errorf("runs as ServiceAccount %q, want fleet-gitops", pod.ServiceAccountName)
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
	wantArgs := []string{"gitops", "--cache-dir=/var/cache/fleet-gitops", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
		"--leader-elect=true", "--concurrency=8", "--webhook-listen=:8090", "--log-level=debug"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q, want %q", c.Args, wantArgs)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("no liveness or readiness probe")
	}
	var cache *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "cache" {
			cache = &pod.Volumes[i]
		}
		if v.Secret != nil || v.HostPath != nil || v.Projected != nil {
			t.Errorf("volume %s mounts a Secret, projected volume or host path", v.Name)
		}
	}
	if cache == nil || cache.EmptyDir == nil || cache.EmptyDir.SizeLimit == nil || cache.EmptyDir.SizeLimit.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("cache volume %+v, want an emptyDir with sizeLimit 2Gi", cache)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "cache" && m.MountPath == "/var/cache/fleet-gitops" && !m.ReadOnly)
	}
	if !mounted {
		t.Errorf("the cache volume is not mounted writable at the --cache-dir: %+v", c.VolumeMounts)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if want := map[string]int32{"metrics": 8080, "probes": 8081, "webhook": 8090}; !cmp.Equal(ports, want) {
		t.Errorf("container ports %v, want %v", ports, want)
	}

	wh := g.services["fleet-gitops-webhook"]
	if wh.Spec.Type != corev1.ServiceTypeLoadBalancer || wh.Annotations["example.com/lb"] != "internal" || len(wh.Spec.Ports) != 1 ||
		wh.Spec.Ports[0].Port != 80 || wh.Spec.Ports[0].TargetPort.String() != "webhook" || wh.Spec.Selector["app"] != "fleet-gitops" {
		t.Errorf("Service fleet-gitops-webhook %+v %v", wh.Spec, wh.Annotations)
	}
	if m := g.services["fleet-gitops-metrics"]; m.Labels["fleet.cattle.io/metrics"] != "true" || m.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service fleet-gitops-metrics %+v", m)
	}

	p := g.policy.Spec
	if !slices.Equal(p.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || p.PodSelector.MatchLabels["app"] != "fleet-gitops" {
		t.Errorf("NetworkPolicy types %v selector %v", p.PolicyTypes, p.PodSelector)
	}
	describe := func(ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer) string {
		var s []string
		for _, pp := range ports {
			s = append(s, fmt.Sprintf("%s/%d", *pp.Protocol, pp.Port.IntValue()))
		}
		var to []string
		for _, peer := range peers {
			if peer.IPBlock != nil {
				to = append(to, peer.IPBlock.CIDR)
			} else {
				to = append(to, "selector")
			}
		}
		if len(to) == 0 {
			to = []string{"anywhere"}
		}
		return strings.Join(s, ",") + " " + strings.Join(to, ",")
	}
	var ingress, egress []string
	for _, r := range p.Ingress {
		ingress = append(ingress, describe(r.Ports, r.From))
	}
	for _, r := range p.Egress {
		egress = append(egress, describe(r.Ports, r.To))
	}
	if want := []string{"TCP/8081,TCP/8080,TCP/8090 anywhere"}; !slices.Equal(ingress, want) {
		t.Errorf("ingress %q, want %q", ingress, want)
	}
	if want := []string{"UDP/53,TCP/53 anywhere", "TCP/443,TCP/6443 anywhere", "TCP/443,TCP/22,TCP/3000 10.0.0.0/8"}; !slices.Equal(egress, want) {
		t.Errorf("egress %q, want %q", egress, want)
	}

	// The webhook off: no Service, no port, the flag empty (the listener off).
	g = renderGitops(t, "gitops: {webhook: {enabled: false}}\n")
	if g.services["fleet-gitops-webhook"] != nil || !slices.Contains(g.deployment.Spec.Template.Spec.Containers[0].Args, "--webhook-listen=") {
		t.Errorf("webhook.enabled false: Service %v, args %v", g.services["fleet-gitops-webhook"] != nil, g.deployment.Spec.Template.Spec.Containers[0].Args)
	}

	for _, o := range renderGitops(t, "gitops: {enabled: false}\n").all {
		if strings.HasPrefix(o.GetName(), "fleet-gitops") {
			t.Errorf("gitops.enabled false renders %s/%s", o.GetKind(), o.GetName())
		}
	}
}
