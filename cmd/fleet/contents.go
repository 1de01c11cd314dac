package main

// A Bundle with spec.contentsId holds no resources: they are in contents
// Secrets of its namespace (internal/bundlecontents). fleet render bundle
// and fleet diff read them from the Bundle's file (fleet apply -o writes
// them before the Bundle) or from the upstream cluster, and check them as
// the controller does.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// bundleResources returns the resources of b: inline, or its contents read
// from the Secrets of file (when it holds them) or else from the upstream
// cluster of f.
func bundleResources(ctx context.Context, f rolloutFlags, file string, b *fleet.Bundle) ([]fleet.BundleResource, error) {
	if b.Spec.ContentsID == "" {
		return b.Spec.Resources, nil
	}
	if len(b.Spec.Resources) > 0 {
		return nil, fmt.Errorf("bundle %s sets both spec.contentsId and spec.resources (%s): remove one", b.Name, fleet.ContentsInvalidReason)
	}
	ns := b.Namespace
	if ns == "" {
		ns = "default"
	}
	index := bundlecontent.ContentsSecretName(b.Name, b.Spec.ContentsID)
	var get bundlecontent.GetSecret
	if secrets, err := fileSecrets(file); err != nil {
		return nil, err
	} else if _, ok := secrets[index]; ok {
		get = func(_ context.Context, name string) (*corev1.Secret, error) {
			if s, ok := secrets[name]; ok {
				return s, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
		}
	} else {
		if f.kubeconfig == "" && f.context == "" {
			where := "they are not in the Bundle's file"
			if file != "" {
				where = file + " does not hold them"
			}
			return nil, usageError("bundle %s holds no resources: spec.contentsId %s names contents Secret %s/%s and its chunks, and %s; give --kubeconfig or --context to read them from the upstream cluster, or the file fleet apply -o writes (the Secrets, then the Bundle)",
				b.Name, b.Spec.ContentsID, ns, index, where)
		}
		u, c, err := f.client("contents Secrets")
		if err != nil {
			return nil, err
		}
		get = func(ctx context.Context, name string) (*corev1.Secret, error) {
			s := &corev1.Secret{}
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
			if err != nil && !apierrors.IsNotFound(err) {
				err = u.Explain(err, "Secrets")
			}
			return s, err
		}
	}
	res, err := bundlecontent.ReadContents(ctx, ns, b.Name, b.Spec.ContentsID, get)
	switch err.(type) {
	case nil:
		return res, nil
	case *bundlecontent.MissingChunkError:
		return nil, fmt.Errorf("bundle %s: its contents %s: %w (%s)", b.Name, b.Spec.ContentsID, err, fleet.WaitingForContentsReason)
	case *bundlecontent.InvalidError:
		return nil, fmt.Errorf("bundle %s: its contents %s: %w (%s)", b.Name, b.Spec.ContentsID, err, fleet.ContentsInvalidReason)
	}
	return nil, fmt.Errorf("bundle %s: reading its contents: %w", b.Name, err)
}

// fileSecrets returns the v1 Secrets of file by name ("": none).
func fileSecrets(file string) (map[string]*corev1.Secret, error) {
	out := map[string]*corev1.Secret{}
	if file == "" {
		return out, nil
	}
	docs, err := readDocuments(file)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if d.meta.Kind != "Secret" || d.meta.APIVersion != "v1" {
			continue
		}
		s := &corev1.Secret{}
		if err := yaml.Unmarshal(d.data, s); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s): %w", file, d.index, d.name(), err)
		}
		// As the API server stores it: stringData written into data.
		for k, v := range s.StringData {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
		out[s.Name] = s
	}
	return out, nil
}
