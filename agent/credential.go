package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/registration"
)

// credential is the agent's request identity, as kept in its local
// fleet-agent Secret.
type credential struct {
	APIServerURL        string
	APIServerCA         []byte
	TLSMode             string
	Token               string
	ClusterNamespace    string // workspace of the Cluster
	ClusterName         string
	DeploymentNamespace string // per-cluster namespace upstream
	ServiceAccount      string
	Expires             time.Time
	Issued              time.Time
}

// bootstrap is the import credential from the fleet-agent-bootstrap Secret.
type bootstrap = registration.Bootstrap

// readCredential reads the local fleet-agent Secret; nil if there is none.
func readCredential(ctx context.Context, local client.Client, ns string) (*credential, error) {
	s := &corev1.Secret{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: ns, Name: registration.AgentCredentialSecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	kc, err := clientcmd.Load(s.Data[registration.KeyKubeconfig])
	if err != nil {
		return nil, fmt.Errorf("local Secret %s/%s holds no valid kubeconfig: %w", ns, registration.AgentCredentialSecretName, err)
	}
	ctxName := kc.CurrentContext
	kctx, ok := kc.Contexts[ctxName]
	if !ok {
		return nil, fmt.Errorf("local Secret %s/%s: kubeconfig has no current context", ns, registration.AgentCredentialSecretName)
	}
	cl, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cl == nil || user == nil || user.Token == "" {
		return nil, fmt.Errorf("local Secret %s/%s: kubeconfig lacks server or token", ns, registration.AgentCredentialSecretName)
	}
	c := &credential{
		APIServerURL:        cl.Server,
		APIServerCA:         cl.CertificateAuthorityData,
		TLSMode:             string(s.Data[registration.KeyAgentTLSMode]),
		Token:               user.Token,
		ClusterNamespace:    string(s.Data[registration.KeyClusterNamespace]),
		ClusterName:         string(s.Data[registration.KeyClusterName]),
		DeploymentNamespace: string(s.Data[registration.KeyDeploymentNamespace]),
		ServiceAccount:      string(s.Data[registration.KeyServiceAccount]),
	}
	c.Expires, _ = time.Parse(time.RFC3339, string(s.Data[registration.KeyExpires]))
	c.Issued, _ = time.Parse(time.RFC3339, string(s.Data[registration.KeyIssued]))
	if c.ClusterNamespace == "" || c.ClusterName == "" || c.DeploymentNamespace == "" {
		return nil, fmt.Errorf("local Secret %s/%s misses cluster keys", ns, registration.AgentCredentialSecretName)
	}
	return c, nil
}

// writeCredential writes the local fleet-agent Secret: a kubeconfig of the
// request identity (usable with kubectl for debugging) and the cluster keys.
func writeCredential(ctx context.Context, local client.Client, ns string, c *credential) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["upstream"] = &clientcmdapi.Cluster{Server: c.APIServerURL, CertificateAuthorityData: c.APIServerCA}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: c.Token}
	kc.Contexts["upstream"] = &clientcmdapi.Context{Cluster: "upstream", AuthInfo: "agent", Namespace: c.DeploymentNamespace}
	kc.CurrentContext = "upstream"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	data := map[string][]byte{
		registration.KeyKubeconfig:          kcBytes,
		registration.KeyClusterNamespace:    []byte(c.ClusterNamespace),
		registration.KeyClusterName:         []byte(c.ClusterName),
		registration.KeyDeploymentNamespace: []byte(c.DeploymentNamespace),
		registration.KeyServiceAccount:      []byte(c.ServiceAccount),
		registration.KeyExpires:             []byte(c.Expires.UTC().Format(time.RFC3339)),
		registration.KeyIssued:              []byte(c.Issued.UTC().Format(time.RFC3339)),
		registration.KeyAgentTLSMode:        []byte(c.TLSMode),
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: registration.AgentCredentialSecretName}}
	err = local.Get(ctx, client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Type = corev1.SecretTypeOpaque
		s.Data = data
		return local.Create(ctx, s)
	case err != nil:
		return err
	}
	s.Data = data
	return local.Update(ctx, s)
}

// readBootstrap reads the local fleet-agent-bootstrap Secret; nil if none.
func readBootstrap(ctx context.Context, local client.Client, ns string) (*bootstrap, error) {
	s := &corev1.Secret{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: ns, Name: registration.BootstrapSecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	b, err := registration.ParseBootstrap(s.Data)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w: reinstall the agent with a ClusterRegistrationToken's values file", ns, registration.BootstrapSecretName, err)
	}
	return b, nil
}
