package bootstrap

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/controller/cluster"
	tokens "github.com/gitops-fleet/fleet/controller/token"
)

// kubeconfigName names the cluster, user and context of the kubeconfig.
const kubeconfigName = "local"

// token is the bearer token in the kubeconfig Secret and what its
// annotations say of it (the same annotations as a token's values Secret).
type token struct {
	bearer          string
	issued, expires time.Time
	saUID           types.UID
}

// renewAt is when the token must be replaced: when a third of its lifetime
// is left.
func (t token) renewAt() time.Time {
	return t.expires.Add(-t.expires.Sub(t.issued) / renewFraction)
}

// tokenOf reads the token of an existing kubeconfig Secret; ok is false when
// there is none, it is of another ServiceAccount than sa (one deleted and
// made again: its tokens no longer authenticate), or its times are unknown.
// A kubeconfig that does not parse holds no token: the parse error is not
// kept, it could quote the Secret.
func tokenOf(s *corev1.Secret, sa *corev1.ServiceAccount) (token, bool) {
	if s == nil || s.Annotations[tokens.TokenServiceAccountUIDAnnotation] != string(sa.UID) {
		return token{}, false
	}
	issued, err1 := time.Parse(time.RFC3339, s.Annotations[tokens.TokenIssuedAnnotation])
	expires, err2 := time.Parse(time.RFC3339, s.Annotations[tokens.TokenExpiresAnnotation])
	if err1 != nil || err2 != nil || !expires.After(issued) {
		return token{}, false
	}
	kc, err := clientcmd.Load(s.Data[cluster.KubeconfigKey])
	if err != nil {
		return token{}, false
	}
	u := kc.AuthInfos[kubeconfigName]
	if u == nil || u.Token == "" {
		return token{}, false
	}
	return token{bearer: u.Token, issued: issued, expires: expires, saUID: sa.UID}, true
}

// secret is the kubeconfig Secret as the bootstrap keeps it: everything it
// sets, every time (a field left out of an apply is removed).
func secret(key client.ObjectKey, server Server, t token) (*corev1.Secret, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[kubeconfigName] = &clientcmdapi.Cluster{Server: server.URL, CertificateAuthorityData: server.CA}
	kc.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{Token: t.bearer}
	kc.Contexts[kubeconfigName] = &clientcmdapi.Context{Cluster: kubeconfigName, AuthInfo: kubeconfigName}
	kc.CurrentContext = kubeconfigName
	value, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the local cluster's kubeconfig: %w", err)
	}
	data := map[string][]byte{
		cluster.KubeconfigKey:   value,
		cluster.APIServerURLKey: []byte(server.URL),
	}
	if len(server.CA) > 0 {
		data[cluster.APIServerCAKey] = server.CA
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Annotations: map[string]string{
			tokens.TokenIssuedAnnotation:            t.issued.UTC().Format(time.RFC3339),
			tokens.TokenExpiresAnnotation:           t.expires.UTC().Format(time.RFC3339),
			tokens.TokenServiceAccountUIDAnnotation: string(t.saUID),
		}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}, nil
}
