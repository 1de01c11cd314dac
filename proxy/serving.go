package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// ServingSecret holds fleet-proxy's serving certificate (made by fleet-proxy
// when missing, so every replica serves the same one and the APIService's
// caBundle fits them all).
const ServingSecret = "fleet-proxy-tls"

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// EnsureServingCertificate reads Secret fleet-proxy-tls in namespace, making
// it if missing with a self-signed certificate for
// <service>.<namespace>.svc, the name the aggregator checks. It returns the
// certificate and the CA bundle that verifies it.
func EnsureServingCertificate(ctx context.Context, c kubernetes.Interface, namespace, service string) (tls.Certificate, []byte, error) {
	secrets := c.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, ServingSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		name := service + "." + namespace + ".svc"
		certPEM, keyPEM, genErr := certutil.GenerateSelfSignedCertKey(name, nil, []string{name, name + ".cluster.local"})
		if genErr != nil {
			return tls.Certificate{}, nil, genErr
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ServingSecret,
				Labels: map[string]string{"app.kubernetes.io/name": "fleet-proxy"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": certPEM},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, ServingSecret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, ServingSecret, err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("Secret %s/%s: %w", namespace, ServingSecret, err)
	}
	ca := s.Data["ca.crt"]
	if len(ca) == 0 {
		ca = s.Data[corev1.TLSCertKey]
	}
	return cert, ca, nil
}

// SetAPIServiceCABundle makes the APIService v1alpha1.proxy.fleet.cattle.io
// trust caBundle.
func SetAPIServiceCABundle(ctx context.Context, c dynamic.Interface, caBundle []byte) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": caBundle}})
	if err != nil {
		return err
	}
	if _, err := c.Resource(apiServices).Patch(ctx, APIServiceName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "fleet-proxy"}); err != nil {
		return fmt.Errorf("setting the caBundle of APIService %s: %w", APIServiceName, err)
	}
	return nil
}
