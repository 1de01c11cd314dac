package devcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
)

// The authorized cluster endpoint in mode webhook (docs/operations.md,
// "Direct access"): the cluster's API server asks the fleet agent, as its
// token webhook, who holds a bearer token it does not know. A cluster of
// Options.DirectWebhook is set up for it before its API server starts: a
// serving certificate for the agent's endpoint, published on the node at
// DirectPort (hostPort), the webhook's kubeconfig naming it, and the flags;
// once the API server answers, the certificate goes into the Secret the agent
// serves with (an operator's Secret: the agent never replaces it).

// DirectPort is the node port the cluster's agent publishes its direct
// endpoint on (spec.agentDirectEndpoint.hostPort), in the dev environment.
func (c *Cluster) DirectPort() int { return 18600 + c.Index }

// DirectAgentNamespace and DirectTLSSecret are where the agent of a dev
// cluster reads its endpoint's certificate (the agent chart's namespace and
// the agent's Secret name).
const (
	DirectAgentNamespace = "cattle-fleet-system"
	DirectTLSSecret      = "fleet-agent-direct-tls"
)

func (c *Cluster) directWebhookPaths() (cert, key, kubeconfig string) {
	d := filepath.Join(c.Dir, "pki")
	return filepath.Join(d, "direct-webhook.crt"), filepath.Join(d, "direct-webhook.key"), filepath.Join(d, "direct-webhook.kubeconfig")
}

// writeDirectWebhook makes the endpoint's certificate (for 127.0.0.1: the
// API server reaches the node port on loopback) and the webhook kubeconfig,
// and returns the API server's flags.
func (c *Cluster) writeDirectWebhook() ([]string, error) {
	certPath, keyPath, kcPath := c.directWebhookPaths()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["fleet-agent"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d/authenticate", c.DirectPort()),
		CertificateAuthorityData: certPEM,
	}
	kc.AuthInfos["kube-apiserver"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["webhook"] = &clientcmdapi.Context{Cluster: "fleet-agent", AuthInfo: "kube-apiserver"}
	kc.CurrentContext = "webhook"
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		return nil, err
	}
	return []string{
		"--authentication-token-webhook-config-file=" + kcPath,
		"--authentication-token-webhook-version=v1",
		// A revoked direct token is refused as soon as the agent knows.
		"--authentication-token-webhook-cache-ttl=10s",
	}, nil
}

// installDirectTLS puts the endpoint's certificate where the agent reads it.
func (c *Cluster) installDirectTLS(ctx context.Context, cs kubernetes.Interface) error {
	certPath, keyPath, _ := c.directWebhookPaths()
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DirectAgentNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: DirectAgentNamespace, Name: DirectTLSSecret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": certPEM},
	}
	if _, err := cs.CoreV1().Secrets(DirectAgentNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
