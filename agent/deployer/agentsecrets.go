package deployer

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the agent keeps per BundleDeployment beside its inventory (the
// deployment history of helm.atomic, the delete hooks) lives in Secrets of
// the agent's namespace, named after the BundleDeployment and annotated
// with it. putBDSecret writes one key of such a Secret when it changed;
// deleteBDSecret removes it. what names it in errors.

func (d *Deployer) putBDSecret(ctx context.Context, name, bdName, what string, labels map[string]string, key string, data []byte) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.opts.AgentNamespace, Name: name}}
	err := d.local.Get(ctx, client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Labels = labels
		s.Annotations = map[string]string{InventoryBundleDeploymentAnnotation: bdName}
		s.Data = map[string][]byte{key: data}
		err = d.local.Create(ctx, s, client.FieldOwner(fieldManager))
	case err == nil && !bytes.Equal(s.Data[key], data):
		s.Data = map[string][]byte{key: data}
		err = d.local.Update(ctx, s, client.FieldOwner(fieldManager))
	}
	if err != nil {
		return fmt.Errorf("writing %s %s/%s: %w", what, s.Namespace, s.Name, err)
	}
	return nil
}

func (d *Deployer) deleteBDSecret(ctx context.Context, name, what string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.opts.AgentNamespace, Name: name}}
	if err := d.local.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", what, s.Namespace, s.Name, err)
	}
	return nil
}
