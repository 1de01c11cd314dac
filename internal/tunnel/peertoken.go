package tunnel

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PeerTokenKey is the key of the peer token in its Secret.
const PeerTokenKey = "token"

// PeerToken reads the token fleet-proxy replicas authenticate each other
// with from Secret key (in the controller's namespace; the chart or
// fleet-proxy makes it, random, at least 32 bytes). Never a pod's
// ServiceAccount token: that would hand a token of the pod's API rights to
// every peer. The error never contains the value.
func PeerToken(ctx context.Context, reader client.Reader, key client.ObjectKey) (string, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, key, s); err != nil {
		return "", fmt.Errorf("reading the peer token Secret %s: %w", key, err)
	}
	token := string(s.Data[PeerTokenKey])
	if len(token) < 32 {
		return "", fmt.Errorf("peer token Secret %s: key %q missing or shorter than 32 bytes", key, PeerTokenKey)
	}
	return token, nil
}
