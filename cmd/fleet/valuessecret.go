package main

// A Bundle with spec.valuesHash keeps its Helm values in the Secret named
// like it (Fleet's fleet apply writes it; internal/valuessecret). fleet
// render bundle and fleet diff read it from the Bundle's file or from the
// upstream cluster, and check it as the controller does.

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/valuessecret"
)

// bundleWithValues returns b as the controller renders it: b itself, or,
// with spec.valuesHash, a copy with the values of its values Secret, read
// from file (when it holds a Secret of that name) or else from the
// upstream cluster of f.
func bundleWithValues(ctx context.Context, f rolloutFlags, file string, b *fleet.Bundle) (*fleet.Bundle, error) {
	if b.Spec.ValuesHash == "" {
		return b, nil
	}
	ns := b.Namespace
	if ns == "" {
		ns = "default"
	}
	secrets, err := fileSecrets(file)
	if err != nil {
		return nil, err
	}
	s, inFile := secrets[b.Name]
	if !inFile {
		if f.kubeconfig == "" && f.context == "" {
			where := "it is not in the Bundle's file"
			if file != "" {
				where = file + " does not hold it"
			}
			return nil, usageError("bundle %s: spec.valuesHash: its Helm values are in Secret %s/%s, and %s; give --kubeconfig or --context to read it from the upstream cluster, or put the Secret in the file",
				b.Name, ns, b.Name, where)
		}
		u, c, err := f.client("Secrets")
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.Name}, s); apierrors.IsNotFound(err) {
			p := valuessecret.Missing(b)
			return nil, fmt.Errorf("bundle %s: %s (%s)", b.Name, p.Message, p.Reason)
		} else if err != nil {
			return nil, u.Explain(err, "Secrets")
		}
	}
	vb, err := valuessecret.Apply(b, s)
	if p := (*valuessecret.Problem)(nil); errors.As(err, &p) {
		return nil, fmt.Errorf("bundle %s: %s (%s)", b.Name, p.Message, p.Reason)
	}
	return vb, err
}
