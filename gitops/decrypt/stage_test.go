package decrypt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

var target = Target{
	GitRepo:    types.NamespacedName{Namespace: "fleet-local", Name: "clusters"},
	GitRepoUID: "uid-1",
	Bundle:     "clusters-dev",
	Namespace:  "fleet-default",
	Reserved:   []string{"local-kubeconfig"},
}

func secret(name, ns string, mutate ...func(*corev1.Secret)) Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeOpaque,
		StringData: map[string]string{"value": kubeconfig}, Data: map[string][]byte{"apiServerURL": []byte("https://up:6443")}}
	for _, m := range mutate {
		m(s)
	}
	return Secret{Path: "clusters/" + name + ".yaml", Secret: s}
}

func TestStage_CopiesIntoTheGitReposNamespaceAndNamesThemInTheBundle(t *testing.T) {
	staged, refs, err := Stage(target, []Secret{
		secret("dev-1-kubeconfig", "fleet-default", func(s *corev1.Secret) { s.Labels = map[string]string{"team": "a"} }),
		secret("dev-2-kubeconfig", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]fleet.DownstreamResource{{Kind: "Secret", Name: "dev-1-kubeconfig"}, {Kind: "Secret", Name: "dev-2-kubeconfig"}}, refs); d != "" {
		t.Fatalf("downstreamResources: %s", d)
	}
	s := staged[0]
	if s.Namespace != "fleet-local" || s.Name != "dev-1-kubeconfig" || s.Type != corev1.SecretTypeOpaque {
		t.Fatalf("staged at %s/%s type %s", s.Namespace, s.Name, s.Type)
	}
	if string(s.Data["value"]) != kubeconfig || string(s.Data["apiServerURL"]) != "https://up:6443" || len(s.StringData) != 0 {
		t.Fatal("stringData not merged into data byte for byte")
	}
	if s.Labels["team"] != "a" || s.Labels[LabelGitRepo] != "clusters" || s.Annotations[AnnotationBundle] != "clusters-dev" || s.Annotations[AnnotationPath] != "clusters/dev-1-kubeconfig.yaml" {
		t.Fatalf("labels %v annotations %v", s.Labels, s.Annotations)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "GitRepo" || s.OwnerReferences[0].UID != "uid-1" {
		t.Fatalf("owner %v", s.OwnerReferences)
	}
	if err := CanWrite(nil, target); err != nil {
		t.Fatalf("cannot create: %v", err)
	}
	if err := CanWrite(s, target); err != nil {
		t.Fatalf("cannot update its own copy: %v", err)
	}
}

func TestStage_Refusals(t *testing.T) {
	for name, c := range map[string]struct {
		secrets []Secret
		want    string
	}{
		"another namespace":    {[]Secret{secret("kc", "kube-system")}, `namespace "kube-system", but its Bundle deploys into "fleet-default"`},
		"same name twice":      {[]Secret{secret("kc", ""), secret("kc", "fleet-default")}, "also defined in clusters/kc.yaml"},
		"workspace kubeconfig": {[]Secret{secret("local-kubeconfig", "")}, "kubeconfig Secret of a Cluster in workspace fleet-local"},
		"fleet label": {[]Secret{secret("kc", "", func(s *corev1.Secret) { s.Labels = map[string]string{"fleet.cattle.io/managed": "true"} })},
			"label fleet.cattle.io/managed"},
		"token type": {[]Secret{secret("kc", "", func(s *corev1.Secret) { s.Type = corev1.SecretTypeServiceAccountToken })}, "never copied"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Stage(target, c.secrets)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
			if strings.Contains(err.Error(), token) {
				t.Fatalf("the error shows a value: %v", err)
			}
		})
	}
}

func TestCanWrite_NeverOverwritesAnotherOwnersSecret(t *testing.T) {
	staged, _, err := Stage(target, []Secret{secret("kc", "")})
	if err != nil {
		t.Fatal(err)
	}
	mine := staged[0]
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-local", Name: "kc"}}
	forged := mine.DeepCopy()
	forged.OwnerReferences = nil // the label alone does not make it ours
	otherRepo := target
	otherRepo.GitRepo.Name, otherRepo.GitRepoUID = "apps", "uid-2"
	otherBundle := target
	otherBundle.Bundle = "clusters-prod"
	for name, c := range map[string]struct {
		existing *corev1.Secret
		t        Target
		want     string
	}{
		"a user's Secret":            {users, target, "not written by GitRepo clusters"},
		"label without owner":        {forged, target, "not written by GitRepo clusters"},
		"another GitRepo's copy":     {mine, otherRepo, "not written by GitRepo apps"},
		"another Bundle's same name": {mine, otherBundle, "already carried by Bundle clusters-dev"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := CanWrite(c.existing, c.t); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
}

func TestLabelValue_LongNamesAreHashed(t *testing.T) {
	long := strings.Repeat("a", 64)
	if v := LabelValue(long); len(v) > 63 || v == LabelValue(long+"b") {
		t.Fatalf("label value %q", v)
	}
	if LabelValue("clusters") != "clusters" {
		t.Fatal("short names are kept")
	}
}
