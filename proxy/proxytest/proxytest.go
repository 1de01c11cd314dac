// Package proxytest registers a fleet-proxy running in a test process with
// a test control plane's aggregator, as charts/fleet does in a cluster.
// Only tests import it.
package proxytest

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/proxy"
)

// Register makes what the chart installs for fleet-proxy, pointing at a
// server on host:port (a non-loopback address: EndpointSlices refuse
// loopback) whose serving certificate caPEM verifies: the Service in
// namespace, its endpoint, the APIService and the entry right every user
// gets (the chart's fleet-proxy-entry). It returns once the aggregated
// group answers through the API server, or after a minute.
func Register(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, host string, port int, caPEM []byte) error {
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fleet-proxy"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fleet-proxy-test",
				Labels: map[string]string{discoveryv1.LabelServiceName: "fleet-proxy"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		},
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
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy-entry"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-proxy-entry"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:authenticated"}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return waitAvailable(ctx, c, cs)
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
