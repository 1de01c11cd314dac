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

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
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

// unusableCredential says the local fleet-agent Secret was read and holds
// no usable credential: only then does the agent register again. A Secret
// that could not be read (the local API server unreachable) is no reason to.
type unusableCredential struct{ err error }

func (u *unusableCredential) Error() string { return u.err.Error() }
func (u *unusableCredential) Unwrap() error { return u.err }

// readCredential reads the local fleet-agent Secret; nil if there is none.
// A Secret that holds no usable credential is an *unusableCredential error;
// any other error means the Secret could not be read.
func readCredential(ctx context.Context, local client.Client, ns string) (*credential, error) {
	s := &corev1.Secret{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: ns, Name: registration.AgentCredentialSecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, localFault(err, "reading the local credential Secret "+ns+"/"+registration.AgentCredentialSecretName)
	}
	kc, err := clientcmd.Load(s.Data[registration.KeyKubeconfig])
	if err != nil {
		return nil, &unusableCredential{fmt.Errorf("local Secret %s/%s holds no valid kubeconfig: %w", ns, registration.AgentCredentialSecretName, err)}
	}
	ctxName := kc.CurrentContext
	kctx, ok := kc.Contexts[ctxName]
	if !ok {
		return nil, &unusableCredential{fmt.Errorf("local Secret %s/%s: kubeconfig has no current context", ns, registration.AgentCredentialSecretName)}
	}
	cl, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cl == nil || user == nil || user.Token == "" {
		return nil, &unusableCredential{fmt.Errorf("local Secret %s/%s: kubeconfig lacks server or token", ns, registration.AgentCredentialSecretName)}
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
		return nil, &unusableCredential{fmt.Errorf("local Secret %s/%s misses cluster keys", ns, registration.AgentCredentialSecretName)}
	}
	return c, nil
}

// writeCredential writes the local fleet-agent Secret: a kubeconfig of the
// request identity (usable with kubectl for debugging) and the cluster keys.
func writeCredential(ctx context.Context, local client.Client, ns string, c *credential) error {
	data, err := credentialData(c)
	if err != nil {
		return err
	}
	// Created at once: a first registration finds none, and one after it
	// (the credential was rejected) replaces the one there.
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: registration.AgentCredentialSecretName}, Type: corev1.SecretTypeOpaque, Data: data}
	if err := local.Create(ctx, s); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return updateCredential(ctx, local, ns, data)
}

// replaceCredential writes a renewed credential over the stored one, and
// only over it: a credential deleted meanwhile (a redeploy) is not made
// again (errCredentialDeleted), so the agent registers as the controller
// asked.
func replaceCredential(ctx context.Context, local client.Client, ns string, c *credential) error {
	data, err := credentialData(c)
	if err != nil {
		return err
	}
	err = updateCredential(ctx, local, ns, data)
	if apierrors.IsNotFound(err) {
		return errCredentialDeleted
	}
	return err
}

// updateCredential replaces the data of the stored credential.
func updateCredential(ctx context.Context, local client.Client, ns string, data map[string][]byte) error {
	s := &corev1.Secret{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: ns, Name: registration.AgentCredentialSecretName}, s); err != nil {
		return err
	}
	s.Data = data
	return local.Update(ctx, s)
}

// credentialData is the data of the local fleet-agent Secret.
func credentialData(c *credential) (map[string][]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["upstream"] = &clientcmdapi.Cluster{Server: c.APIServerURL, CertificateAuthorityData: c.APIServerCA}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: c.Token}
	kc.Contexts["upstream"] = &clientcmdapi.Context{Cluster: "upstream", AuthInfo: "agent", Namespace: c.DeploymentNamespace}
	kc.CurrentContext = "upstream"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		registration.KeyKubeconfig:          kcBytes,
		registration.KeyClusterNamespace:    []byte(c.ClusterNamespace),
		registration.KeyClusterName:         []byte(c.ClusterName),
		registration.KeyDeploymentNamespace: []byte(c.DeploymentNamespace),
		registration.KeyServiceAccount:      []byte(c.ServiceAccount),
		registration.KeyExpires:             []byte(c.Expires.UTC().Format(time.RFC3339)),
		registration.KeyIssued:              []byte(c.Issued.UTC().Format(time.RFC3339)),
		registration.KeyAgentTLSMode:        []byte(c.TLSMode),
	}, nil
}

// readBootstrap reads the local fleet-agent-bootstrap Secret; nil if none.
// A Secret that holds no usable bootstrap is a NoBootstrapCredential stuck
// state; one that could not be read is not.
func readBootstrap(ctx context.Context, local client.Client, ns string) (*bootstrap, error) {
	s := &corev1.Secret{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: ns, Name: registration.BootstrapSecretName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, localFault(err, "reading the bootstrap Secret "+ns+"/"+registration.BootstrapSecretName)
	}
	b, err := registration.ParseBootstrap(s.Data)
	if err != nil {
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason, "Secret %s/%s: %v: reinstall the agent with a ClusterRegistrationToken's values file", ns, registration.BootstrapSecretName, err)
	}
	return b, nil
}
