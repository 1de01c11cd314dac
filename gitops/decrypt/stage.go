package decrypt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// How a decrypted Secret reaches its target: the source component writes a
// staged copy into the GitRepo's own namespace, the namespace that already
// holds the decryption key (whoever may read it could decrypt the files
// anyway, so the copy adds no reader), and the path's Bundle names it in
// downstreamResources instead of carrying it. The controller copies it into
// the content Secret of each target cluster (readable by that cluster's
// agent alone), and the agent applies it into the Bundle's namespace. No
// Bundle, BundleDeployment, status, event or log ever holds a value.
const (
	// LabelGitRepo marks a staged Secret with the name of the GitRepo that
	// wrote it (hashed when longer than a label value may be), so the
	// reconciler can list and prune them. It is not under fleet.cattle.io/:
	// the controller never copies a Secret with a fleet label.
	LabelGitRepo = "gitops.fleet.cattle.io/gitrepo"
	// AnnotationBundle names the Bundle whose path the staged Secret came
	// from (annotations are not copied downstream).
	AnnotationBundle = "gitops.fleet.cattle.io/bundle"
	// AnnotationPath is the file it was decrypted from.
	AnnotationPath = "gitops.fleet.cattle.io/path"
)

// Target is where one path's decrypted Secrets go.
type Target struct {
	// GitRepo owns the staged copies; they live in its namespace.
	GitRepo types.NamespacedName
	// GitRepoUID makes the copies the GitRepo's (garbage-collected with it).
	GitRepoUID types.UID
	// Bundle is the path's Bundle.
	Bundle string
	// Namespace is where the Bundle deploys (its namespace option, else
	// defaultNamespace, else "default"): where the agent puts the copies.
	Namespace string
	// Reserved are Secret names of the GitRepo's namespace that the
	// controller never copies downstream (the kubeconfig Secrets of that
	// workspace's Clusters): staging one is refused at once.
	Reserved []string
}

// Stage returns the Secrets the reconciler applies into the GitRepo's
// namespace and the downstreamResources entries it adds to the path's
// Bundle, or an error naming the file and what to change.
func Stage(t Target, secrets []Secret) ([]*corev1.Secret, []fleet.DownstreamResource, error) {
	var staged []*corev1.Secret
	var refs []fleet.DownstreamResource
	seen := map[string]string{}
	for _, d := range secrets {
		s := d.Secret
		where := fmt.Sprintf("%s: Secret %q", d.Path, s.Name)
		if s.Namespace != "" && s.Namespace != t.Namespace {
			return nil, nil, fmt.Errorf("%s is in namespace %q, but its Bundle deploys into %q: a decrypted Secret lands in the Bundle's namespace; set namespace or defaultNamespace in fleet.yaml, or remove metadata.namespace", where, s.Namespace, t.Namespace)
		}
		if prev, dup := seen[s.Name]; dup {
			return nil, nil, fmt.Errorf("%s is also defined in %s: one name, one Secret", where, prev)
		}
		seen[s.Name] = d.Path
		if slices.Contains(t.Reserved, s.Name) {
			return nil, nil, fmt.Errorf("%s has the name of a kubeconfig Secret of a Cluster in workspace %s, which is never copied to clusters: rename it", where, t.GitRepo.Namespace)
		}
		switch s.Type {
		case corev1.SecretTypeServiceAccountToken, corev1.SecretTypeBootstrapToken, bundlecontent.SecretType:
			return nil, nil, fmt.Errorf("%s has type %s, which is never copied to clusters", where, s.Type)
		}
		for k := range s.Labels {
			if strings.HasPrefix(k, fleet.GroupVersion.Group+"/") {
				return nil, nil, fmt.Errorf("%s has label %s: labels under %s/ are fleet's own and such a Secret is never copied to clusters", where, k, fleet.GroupVersion.Group)
			}
		}
		data := maps.Clone(s.Data)
		if data == nil && len(s.StringData) > 0 {
			data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			data[k] = []byte(v)
		}
		labels := maps.Clone(s.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelGitRepo] = LabelValue(t.GitRepo.Name)
		staged = append(staged, &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{
				Name:        s.Name,
				Namespace:   t.GitRepo.Namespace,
				Labels:      labels,
				Annotations: map[string]string{AnnotationBundle: t.Bundle, AnnotationPath: d.Path},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: fleet.GroupVersion.String(), Kind: "GitRepo",
					Name: t.GitRepo.Name, UID: t.GitRepoUID,
				}},
			},
			Type: s.Type,
			Data: data,
		})
		refs = append(refs, fleet.DownstreamResource{Kind: "Secret", Name: s.Name})
	}
	return staged, refs, nil
}

// CanWrite says whether the reconciler may write the staged Secret over
// existing (nil: absent): only over a copy this GitRepo staged for the same
// Bundle. The source component never overwrites a Secret of the workspace
// it did not write.
func CanWrite(existing *corev1.Secret, t Target) error {
	if existing == nil {
		return nil
	}
	key := existing.Namespace + "/" + existing.Name
	if existing.Labels[LabelGitRepo] != LabelValue(t.GitRepo.Name) || !ownedBy(existing, t) {
		return fmt.Errorf("Secret %s already exists and was not written by GitRepo %s: it is not overwritten; rename the Secret in git or delete the existing one", key, t.GitRepo.Name)
	}
	if b := existing.Annotations[AnnotationBundle]; b != t.Bundle {
		return fmt.Errorf("Secret %s is already carried by Bundle %s of this GitRepo (%s): two paths cannot carry Secrets of the same name", key, b, existing.Annotations[AnnotationPath])
	}
	return nil
}

func ownedBy(s *corev1.Secret, t Target) bool {
	return slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.Kind == "GitRepo" && o.Name == t.GitRepo.Name && (t.GitRepoUID == "" || o.UID == t.GitRepoUID)
	})
}

// LabelValue is name, or a hash of it when longer than a label value may be.
func LabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256-" + hex.EncodeToString(sum[:])[:40]
}
