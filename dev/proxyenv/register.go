// Package proxyenv wires fleet-proxy and agents' tunnels on local control
// planes (dev/controlplane) for the access tests and the
// benchmark: it registers a fleet-proxy listening on this machine with the
// upstream aggregator, as charts/fleet does in a cluster, makes what a grant
// leaves for an agent's identity, and runs an agent's tunnel with its
// access handler, as the agent does.
package proxyenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/proxy"
)

// Replica is a fleet-proxy listener on this machine: a non-loopback
// host (EndpointSlices refuse loopback) and a port.
type Replica struct {
	Host string
	Port int
}

// Register makes what the chart installs for fleet-proxy, pointing at a
// server on host:port (a non-loopback address: EndpointSlices refuse
// loopback) whose serving certificate caPEM verifies: the Service in
// namespace, its endpoint, the APIService and the entry right every user
// gets (the chart's fleet-proxy-entry). It returns once the aggregated
// group answers through the API server, or after a minute.
func Register(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, host string, port int, caPEM []byte) error {
	return RegisterReplicas(ctx, c, cs, namespace, caPEM, Replica{Host: host, Port: port})
}

// RegisterReplicas is Register for replicas that share the serving
// certificate: one ready endpoint each, in its own EndpointSlice (replicas
// in one process differ by port, and a slice has one port list).
func RegisterReplicas(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace string, caPEM []byte, replicas ...Replica) error {
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fleet-proxy"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}}},
		},
	}
	for _, r := range replicas {
		objs = append(objs, endpointSlice(namespace, r, true))
	}
	objs = append(objs,
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": proxy.APIServiceName},
			"spec": map[string]any{
				"group": proxy.Group, "version": proxy.Version,
				"service":              map[string]any{"namespace": namespace, "name": "fleet-proxy", "port": int64(443)},
				"caBundle":             caPEM,
				"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			},
		}},
		// The chart's fleet-proxy-entry (charts/fleet/templates; the
		// chart test in cmd/fleet pins the same rules).
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy-entry"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{proxy.Group}, Resources: []string{"clusters/proxy"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
				{APIGroups: []string{proxy.Group}, Resources: []string{"signingkeys"}, Verbs: []string{"get", "list"}},
				{APIGroups: []string{proxy.Group}, Resources: []string{"clusters/token"}, Verbs: []string{"create"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy-entry"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-proxy-entry"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:authenticated"}},
		},
	)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return waitAvailable(ctx, c, cs)
}

// RegisterEndpoint makes what the chart makes in kube-public for
// fleet-proxy's endpoint (proxy.endpoint): ConfigMap fleet-proxy-endpoint
// with url, which every authenticated user may get (fleet-proxy writes the
// CA into it; here it runs as an admin).
func RegisterEndpoint(ctx context.Context, c client.Client, url string) error {
	ns, name := proxyv1.EndpointConfigMapNamespace, proxyv1.EndpointConfigMap
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{proxyv1.EndpointURLKey: url}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-proxy-endpoint-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}, Verbs: []string{"get"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-proxy-endpoint-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fleet-proxy-endpoint-reader"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:authenticated"}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// SetReady makes replica r a ready endpoint of Service fleet-proxy, or a
// not ready one (as a terminating pod's), as the EndpointSlice controller
// would: the aggregator sends requests only to ready endpoints, and
// fleet-proxy peers only with those.
func SetReady(ctx context.Context, c client.Client, namespace string, r Replica, ready bool) error {
	want := endpointSlice(namespace, r, ready)
	got := &discoveryv1.EndpointSlice{}
	err := c.Get(ctx, client.ObjectKeyFromObject(want), got)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	got.Endpoints = want.Endpoints
	return c.Update(ctx, got)
}

func endpointSlice(namespace string, r Replica, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("fleet-proxy-test-%d", r.Port),
			Labels: map[string]string{discoveryv1.LabelServiceName: "fleet-proxy"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{r.Host},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Terminating: ptr.To(!ready)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(r.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// AgentIdentity makes what a grant of registration reg leaves for Cluster
// workspace/cluster (controller/registration): the Cluster with its
// status.namespace, the cluster namespace, the registration granted as
// that Cluster, its request ServiceAccount, and the workspace Role's
// attach right, here on attachable (a grant gives only the own Cluster).
// It returns the request ServiceAccount (mint its token to attach).
func AgentIdentity(ctx context.Context, c client.Client, workspace, cluster, reg string, attachable ...string) (*corev1.ServiceAccount, error) {
	clusterNS := names.ClusterNamespace(workspace, cluster)
	cl := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: cluster}, Spec: fleet.ClusterSpec{ClientID: "client-" + cluster}}
	if err := c.Create(ctx, cl); err != nil {
		return nil, err
	}
	cl.Status.Namespace = clusterNS
	if err := c.Status().Update(ctx, cl); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, names.NewClusterNamespace(workspace, cluster)); err != nil {
		return nil, err
	}
	r := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: reg},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: "client-" + cluster, ClientRandom: "random-0123456789-" + reg},
	}
	if err := c.Create(ctx, r); err != nil {
		return nil, err
	}
	r.Status.Granted, r.Status.ClusterName = true, cl.Name
	if err := c.Status().Update(ctx, r); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: clusterNS, Name: registration.RequestServiceAccountName(reg),
		Labels: map[string]string{
			fleet.ManagedLabel:                      "true",
			registration.RegistrationLabel:          reg,
			registration.RegistrationNamespaceLabel: workspace,
		},
		Annotations: map[string]string{
			fleet.ClusterRegistrationAnnotation:          reg,
			fleet.ClusterRegistrationNamespaceAnnotation: workspace,
			fleet.ClusterAnnotation:                      cluster,
		},
	}}
	if err := c.Create(ctx, sa); err != nil {
		return nil, err
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: sa.Name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{registration.ProxyAPIGroup}, Resources: []string{"clusters/attach", "clusters/revocations"},
			ResourceNames: attachable, Verbs: []string{"get"}}},
	}
	if err := c.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: sa.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: sa.Namespace, Name: sa.Name}},
	}); err != nil {
		return nil, err
	}
	return sa, nil
}

// waitAvailable waits (a minute at most) for the APIService to be
// Available and the group to answer through the API server.
func waitAvailable(ctx context.Context, c client.Client, cs kubernetes.Interface) error {
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		as := &unstructured.Unstructured{}
		as.SetAPIVersion("apiregistration.k8s.io/v1")
		as.SetKind("APIService")
		last = c.Get(ctx, client.ObjectKey{Name: proxy.APIServiceName}, as)
		if last == nil {
			conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
			last = fmt.Errorf("APIService not Available: %v", conds)
			for _, cond := range conds {
				if m, _ := cond.(map[string]any); m["type"] == "Available" && m["status"] == "True" {
					last = nil
				}
			}
		}
		if last == nil {
			if _, last = cs.Discovery().ServerResourcesForGroupVersion(proxy.GroupVersion); last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("waiting for APIService %s: %w", proxy.APIServiceName, last)
}
