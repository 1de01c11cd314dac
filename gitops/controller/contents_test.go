package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// A path whose resources do not fit in one object is written as contents
// Secrets and a Bundle naming them (spec.contentsId), with the source
// component's own rights (no list on Secrets); the next version's contents
// replace the earlier ones, which are deleted by name.
func TestGitRepo_LargePathIsWrittenAsContents(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "git", "s3cret")
	big := func() string {
		b := make([]byte, 1200<<10)
		_, _ = rand.Read(b)
		// Incompressible text: the resources stay over 1 MiB once gzipped.
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: " + base64.StdEncoding.EncodeToString(b) + "\n"
	}
	srv.commit(map[string]string{"big/cm.yaml": big(), "big/fleet.yaml": "defaultNamespace: big\n"})
	basicAuth(t, ns, "git-auth", "git", "s3cret")
	g := gitRepo(t, ns, "large", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName = "git-auth"
		g.Spec.Paths = []string{"big"}
	})

	contentsOf := func(b fleet.Bundle) (*corev1.Secret, error) {
		if b.Spec.ContentsID == "" || len(b.Spec.Resources) > 0 {
			return nil, fmt.Errorf("Bundle %s: contentsId %q, %d resources inline", b.Name, b.Spec.ContentsID, len(b.Spec.Resources))
		}
		index := &corev1.Secret{}
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: bundlecontent.ContentsSecretName(b.Name, b.Spec.ContentsID)}, index)
		return index, err
	}
	var first fleet.Bundle
	testenv.Eventually(t, timeout, "the large path's Bundle written with its contents", func() error {
		first = bundles(t, g)["large-big"]
		index, err := contentsOf(first)
		if err != nil {
			return err
		}
		if !metav1.IsControlledBy(index, &first) {
			return fmt.Errorf("contents Secret %s is not owned by the Bundle: %v", index.Name, index.OwnerReferences)
		}
		return nil
	})

	srv.commit(map[string]string{"big/cm.yaml": big()})
	rec.Trigger(key(g), "test")
	testenv.Eventually(t, timeout, "the next version's contents replace the first's", func() error {
		b := bundles(t, g)["large-big"]
		if b.Spec.ContentsID == first.Spec.ContentsID {
			return fmt.Errorf("contentsId still %s", b.Spec.ContentsID)
		}
		if _, err := contentsOf(b); err != nil {
			return err
		}
		old := &corev1.Secret{}
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: bundlecontent.ContentsSecretName(b.Name, first.Spec.ContentsID)}, old)
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the first contents' index is still there (%v)", err)
		}
		return nil
	})
}
