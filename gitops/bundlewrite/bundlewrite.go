// Package bundlewrite is what `fleet apply` and the source component share
// when they write a GitRepo's Bundles: the Bundle as it is applied, and the
// takeover check that keeps a GitRepo from overwriting a Bundle of the same
// name that someone else made (another GitRepo, an agent's Bundle, one
// applied by hand).
package bundlewrite

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Object is the Bundle as it is written: no status, no empty
// creationTimestamp.
func Object(b *fleet.Bundle) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// CheckTakeover says whether a Bundle of GitRepo repo may be written over
// existing (nil: none exists). It may when existing carries the GitRepo's
// label (fleet.RepoLabel) and is not controlled by another object than
// owner: a GitRepo's own Bundles, including those `fleet apply` wrote for
// the same name. owner is the GitRepo's UID when the source component
// writes, empty for `fleet apply` (which holds no GitRepo).
func CheckTakeover(existing *fleet.Bundle, repo string, owner types.UID) error {
	if existing == nil {
		return nil
	}
	switch label := existing.Labels[fleet.RepoLabel]; {
	case label == "":
		return errors.New("a Bundle of this name exists and was not made by fleet apply or a GitRepo; not overwritten (give the fleet.yaml another name)")
	case label != repo:
		return fmt.Errorf("a Bundle of this name belongs to GitRepo %q; not overwritten (give the fleet.yaml another name)", label)
	}
	if owner != "" {
		if ref := metav1.GetControllerOfNoCopy(existing); ref != nil && ref.UID != owner {
			return fmt.Errorf("a Bundle of this name is controlled by %s %q (uid %s), not by this GitRepo; not overwritten", ref.Kind, ref.Name, ref.UID)
		}
	}
	if existing.DeletionTimestamp != nil {
		return errors.New("the Bundle is being deleted; written again once it is gone")
	}
	return nil
}
