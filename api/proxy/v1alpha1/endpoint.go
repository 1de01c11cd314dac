package v1alpha1

// Where fleet-proxy's endpoint is (its own listener, reached without the
// upstream API server: docs/design/cluster-access.md, "fleet-proxy's
// endpoint"): ConfigMap kube-public/fleet-proxy-endpoint, key EndpointURLKey
// the URL users reach it at and EndpointCAKey the CA that verifies its
// serving certificate. kube-public is where Kubernetes keeps what every user
// may read about a cluster (cluster-info); the chart makes the ConfigMap
// with the URL and lets every authenticated user get it, and fleet-proxy
// writes the CA. `fleet kubeconfig` reads it.
const (
	EndpointConfigMapNamespace = "kube-public"
	EndpointConfigMap          = "fleet-proxy-endpoint"
	EndpointURLKey             = "url"
	EndpointCAKey              = "ca.crt"
)
