package bundlecontents

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
)

// randomFile is n bytes of base64 of random bytes: gzip shrinks it to
// about three quarters, no more.
func randomFile(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 29))
	raw := make([]byte, n*3/4)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func bundleOf(files ...string) *fleet.Bundle {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "monitoring"}}
	for i, f := range files {
		b.Spec.Resources = append(b.Spec.Resources, fleet.BundleResource{Name: "files/" + string(rune('a'+i)) + ".txt", Content: f})
	}
	return b
}

// namespace holds Secrets by name, as the Bundle's namespace does.
type namespace map[string]*corev1.Secret

func (n namespace) get(_ context.Context, name string) (*corev1.Secret, error) {
	if s, ok := n[name]; ok {
		return s.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestSplit_SmallBundleIsWrittenAsItIs(t *testing.T) {
	b := bundleOf(randomFile(1, 100<<10))
	out, secrets, err := Split(b, 0)
	if err != nil || out != b || len(secrets) != 0 {
		t.Fatalf("Split of a 100 KB Bundle: same %v, %d Secrets, %v", out == b, len(secrets), err)
	}
}

// TestSplit_LargeBundleGoesToImmutableContentsSecretsReadBackChecked: the
// resources of a Bundle of 2.4 MB (more than gzip takes under 1.5 MiB) go
// to chunks of at most 960 KiB and an index, written last; the Bundle keeps
// no resources and names them by "s-<sha256 of their JSON>"; read back
// they are the resources; a chunk changed or missing is refused, naming it.
func TestSplit_LargeBundleGoesToImmutableContentsSecretsReadBackChecked(t *testing.T) {
	b := bundleOf(randomFile(1, 600<<10), randomFile(2, 600<<10), randomFile(3, 600<<10), randomFile(4, 600<<10))
	orig := b.DeepCopy()
	out, secrets, err := Split(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b, orig) {
		t.Errorf("Split changed its argument")
	}
	js, _ := json.Marshal(orig.Spec.Resources)
	sum := sha256.Sum256(js)
	if want := "s-" + hex.EncodeToString(sum[:]); out.Spec.ContentsID != want || len(out.Spec.Resources) != 0 {
		t.Fatalf("Bundle as written: contentsId %q (want %q), %d resources", out.Spec.ContentsID, want, len(out.Spec.Resources))
	}
	if len(secrets) < 3 {
		t.Fatalf("%d Secrets, want chunks and an index", len(secrets))
	}
	ns := namespace{}
	var total int
	for i, s := range secrets {
		last := i == len(secrets)-1
		wantType := bundlecontent.ContentsChunkType
		if last {
			wantType = bundlecontent.ContentsSecretType
		}
		if s.Type != wantType || s.Immutable == nil || !*s.Immutable || s.Namespace != b.Namespace ||
			s.Labels[bundlecontent.ContentsLabel] != "true" || s.Labels[fleet.BundleLabel] != b.Name || s.Annotations[bundlecontent.ContentsIDAnnotation] != out.Spec.ContentsID {
			t.Errorf("Secret %d %s: type %s, immutable %v, labels %v, annotations %v", i, s.Name, s.Type, s.Immutable, s.Labels, s.Annotations)
		}
		if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
			t.Errorf("Secret name %q: %v", s.Name, errs)
		}
		if !last {
			if n := len(s.Data[bundlecontent.KeyChunk]); n > bundlecontent.MaxChunkBytes {
				t.Errorf("chunk %s holds %d bytes", s.Name, n)
			}
			total += len(s.Data[bundlecontent.KeyChunk])
		}
		ns[s.Name] = s
	}
	if total <= 3<<19 {
		t.Errorf("the contents gzip to %d bytes; the test wants more than 1.5 MiB", total)
	}
	if last := secrets[len(secrets)-1]; last.Name != bundlecontent.ContentsSecretName(b.Name, out.Spec.ContentsID) {
		t.Errorf("the index is %s, want %s", last.Name, bundlecontent.ContentsSecretName(b.Name, out.Spec.ContentsID))
	}

	res, err := bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, out.Spec.ContentsID, ns.get)
	if err != nil || !reflect.DeepEqual(res, orig.Spec.Resources) {
		t.Fatalf("read back: %d resources, %v", len(res), err)
	}

	// A chunk changed: refused, naming it.
	forged := namespace{}
	for k, v := range ns {
		forged[k] = v.DeepCopy()
	}
	victim := secrets[1].Name
	forged[victim].Data[bundlecontent.KeyChunk][100] ^= 1
	_, err = bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, out.Spec.ContentsID, forged.get)
	var invalid *bundlecontent.InvalidError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "write the Bundle again") {
		t.Errorf("a changed chunk: %v", err)
	}
	// A chunk missing: named.
	delete(forged, victim)
	_, err = bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, out.Spec.ContentsID, forged.get)
	var missing *bundlecontent.MissingChunkError
	if !errors.As(err, &missing) || missing.Name != victim {
		t.Errorf("a missing chunk: %v", err)
	}
	// A contentsId that is not the resources': refused (the index names
	// other contents).
	other := "s-" + strings.Repeat("0", 64)
	ns[bundlecontent.ContentsSecretName(b.Name, other)] = ns[bundlecontent.ContentsSecretName(b.Name, out.Spec.ContentsID)]
	if _, err := bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, other, ns.get); !errors.As(err, &invalid) {
		t.Errorf("contents under another ID: %v", err)
	}
	// Chunks of a Deployment's content are not a Bundle's contents: the
	// types differ.
	if _, err := bundlecontent.Read(t.Context(), secrets[len(secrets)-1], b.Name, "", ns.get); !errors.As(err, &invalid) {
		t.Errorf("contents read as a BundleDeployment's content: %v", err)
	}
}

func TestSplit_BundleWithContentsIDIsLeftAsItIs(t *testing.T) {
	b := bundleOf()
	b.Spec.ContentsID = "s-" + strings.Repeat("a", 64)
	out, secrets, err := Split(b, 0)
	if err != nil || out != b || len(secrets) != 0 {
		t.Errorf("Split: same %v, %d Secrets, %v", out == b, len(secrets), err)
	}
}

// TestSplit_ContentsThatGzipSmallAreOneSecret: resources over the threshold
// whose gzip fits in one Secret are one Secret, the index holding them
// inline, read back checked.
func TestSplit_ContentsThatGzipSmallAreOneSecret(t *testing.T) {
	b := bundleOf(strings.Repeat("apiVersion: v1\nkind: ConfigMap\n", 40000))
	out, secrets, err := Split(b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets) != 1 || secrets[0].Type != bundlecontent.ContentsSecretType || bundlecontent.IsChunked(secrets[0]) || out.Spec.ContentsID == "" {
		t.Fatalf("%d Secrets (want one holding the contents inline), contentsId %q", len(secrets), out.Spec.ContentsID)
	}
	ns := namespace{secrets[0].Name: secrets[0]}
	res, err := bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, out.Spec.ContentsID, ns.get)
	if err != nil || !reflect.DeepEqual(res, b.Spec.Resources) {
		t.Fatalf("read back: %d resources, %v", len(res), err)
	}
	// Changed: refused.
	forged := secrets[0].DeepCopy()
	forged.Data[bundlecontent.KeyManifests][len(forged.Data[bundlecontent.KeyManifests])-9] ^= 1
	if _, err := bundlecontent.ReadContents(t.Context(), b.Namespace, b.Name, out.Spec.ContentsID, namespace{forged.Name: forged}.get); !errors.As(err, new(*bundlecontent.InvalidError)) {
		t.Errorf("changed inline contents: %v", err)
	}
}
