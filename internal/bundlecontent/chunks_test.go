package bundlecontent

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// bigManifests are n ConfigMaps of random hex: they compress to about half.
func bigManifests(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for i := range n {
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\ndata:\n  blob: %s\n", i, hex.EncodeToString(buf))
	}
	return []byte(b.String())
}

// store is the cluster namespace: the content Secret and its chunks.
type store map[string]*corev1.Secret

func (s store) get(_ context.Context, name string) (*corev1.Secret, error) {
	if x, ok := s[name]; ok {
		return x.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

// clone copies the store, data included, so a test may change it.
func (s store) clone() store {
	out := store{}
	for k, v := range s {
		c := v.DeepCopy()
		out[k] = c
	}
	return out
}

func write(t *testing.T, bd string, manifests []byte) (store, *Encoded) {
	t.Helper()
	enc, err := EncodeContent(bd, manifests)
	if err != nil {
		t.Fatal(err)
	}
	st := store{bd: {ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-ns", Name: bd}, Type: SecretType, Data: enc.Data}}
	for _, c := range enc.Chunks {
		st[c.Name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-ns", Name: c.Name}, Type: ChunkSecretType, Data: map[string][]byte{KeyChunk: c.Data}}
	}
	return st, enc
}

func TestEncodeContent_SmallContentStaysInlineAsBefore(t *testing.T) {
	m := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	enc, err := EncodeContent("app", m)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := Encode(m)
	if len(enc.Chunks) != 0 || string(enc.Data[KeyManifests]) != string(old[KeyManifests]) || string(enc.Data[KeyManifestID]) != string(old[KeyManifestID]) || len(enc.Data) != 2 {
		t.Fatalf("small content is not the inline content agents always read: %d chunks, keys %v", len(enc.Chunks), enc.Data)
	}
	// An agent that knows only Decode reads it.
	s := &corev1.Secret{Type: SecretType, Data: enc.Data}
	if got, err := Decode(s, ManifestID(m)); err != nil || string(got) != string(m) {
		t.Fatalf("Decode: %q %v", got, err)
	}
}

func TestEncodeContent_LargeContentIsChunkedAndReadBack(t *testing.T) {
	m := bigManifests(50) // 3.2 MB of hex, ~1.7 MB gzipped
	st, enc := write(t, "app", m)
	if len(enc.Chunks) < 2 {
		t.Fatalf("%d chunks for %d gzipped bytes", len(enc.Chunks), enc.Size)
	}
	for i, c := range enc.Chunks {
		if len(c.Data) > MaxChunkBytes {
			t.Errorf("chunk %d is %d bytes", i, len(c.Data))
		}
		if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 || len(c.Name) > 63 {
			t.Errorf("chunk name %q: %v", c.Name, errs)
		}
	}
	if _, ok := enc.Data[KeyManifests]; ok {
		t.Error("chunked content also holds the manifests inline")
	}
	got, err := Read(t.Context(), st["app"], "app", ManifestID(m), st.get)
	if err != nil || string(got) != string(m) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	// Another content of the same BundleDeployment has other chunk names,
	// so both can exist while one replaces the other.
	_, enc2 := write(t, "app", bigManifests(51))
	for _, c := range enc2.Chunks {
		if _, clash := st[c.Name]; clash {
			t.Errorf("chunk %s is a name of the previous content too", c.Name)
		}
	}
}

func TestRead_RefusesTamperedMissingAndForeignChunks(t *testing.T) {
	m := bigManifests(60)
	written, enc := write(t, "app", m)
	if len(enc.Chunks) < 3 {
		t.Fatalf("%d chunks", len(enc.Chunks))
	}
	for _, tc := range []struct {
		name   string
		change func(st store, enc *Encoded)
		want   func(error) bool
		says   string
	}{
		{"a chunk's bytes changed", func(st store, enc *Encoded) {
			d := st[enc.Chunks[1].Name].Data[KeyChunk]
			d[100] ^= 0xff
		}, isInvalid, "does not match its digest"},
		{"a chunk replaced by one of the same length", func(st store, enc *Encoded) {
			st[enc.Chunks[0].Name].Data[KeyChunk] = make([]byte, len(enc.Chunks[0].Data))
		}, isInvalid, "does not match its digest"},
		{"a chunk of another type", func(st store, enc *Encoded) {
			st[enc.Chunks[0].Name].Type = corev1.SecretTypeOpaque
		}, isInvalid, "has type"},
		{"a chunk missing", func(st store, enc *Encoded) {
			delete(st, enc.Chunks[2].Name)
		}, isMissing, "does not exist"},
		{"the index names another Secret", func(st store, enc *Encoded) {
			idx := Index{}
			_ = json.Unmarshal(st["app"].Data[KeyChunks], &idx)
			idx.Chunks[0].Name = "fleet-agent"
			st["app"].Data[KeyChunks], _ = json.Marshal(idx)
		}, isInvalid, "names chunk 0"},
		{"the index of a newer layout", func(st store, enc *Encoded) {
			idx := Index{}
			_ = json.Unmarshal(st["app"].Data[KeyChunks], &idx)
			idx.Version = 2
			st["app"].Data[KeyChunks], _ = json.Marshal(idx)
		}, isInvalid, "upgrade the agent"},
		{"a chunk dropped from the index", func(st store, enc *Encoded) {
			idx := Index{}
			_ = json.Unmarshal(st["app"].Data[KeyChunks], &idx)
			idx.Size -= int64(idx.Chunks[len(idx.Chunks)-1].Size)
			idx.Chunks = idx.Chunks[:len(idx.Chunks)-1]
			st["app"].Data[KeyChunks], _ = json.Marshal(idx)
		}, isInvalid, "chunks of secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := written.clone()
			tc.change(st, enc)
			_, err := Read(t.Context(), st["app"], "app", ManifestID(m), st.get)
			if err == nil || !tc.want(err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %T %v, want one saying %q", err, err, tc.says)
			}
		})
	}
}

func TestRead_OtherManifestsAreStaleNotInvalid(t *testing.T) {
	m := bigManifests(40)
	st, _ := write(t, "app", m)
	_, err := Read(t.Context(), st["app"], "app", ManifestID([]byte("next")), st.get)
	var stale *StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("got %T %v, want a StaleError", err, err)
	}
	small := []byte("kind: ConfigMap\n")
	st, _ = write(t, "app", small)
	if _, err := Read(t.Context(), st["app"], "app", ManifestID(m), st.get); !errors.As(err, &stale) {
		t.Fatalf("inline: got %T %v, want a StaleError", err, err)
	}
}

func TestRead_APIErrorsPassThrough(t *testing.T) {
	m := bigManifests(40)
	st, _ := write(t, "app", m)
	boom := errors.New("connection refused")
	_, err := Read(t.Context(), st["app"], "app", ManifestID(m), func(context.Context, string) (*corev1.Secret, error) { return nil, boom })
	if !errors.Is(err, boom) || isInvalid(err) || isMissing(err) {
		t.Fatalf("got %T %v", err, err)
	}
}

func TestEncodeContent_RefusesMoreThanTheLimit(t *testing.T) {
	if _, err := EncodeContent("app", make([]byte, MaxManifestBytes+1)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("got %v", err)
	}
	if MaxChunks*MaxChunkBytes < MaxManifestBytes+MaxManifestBytes/1000 {
		t.Fatalf("MaxChunks %d cannot hold manifests of the limit that do not compress", MaxChunks)
	}
}

func isInvalid(err error) bool {
	var e *InvalidError
	return errors.As(err, &e)
}

func isMissing(err error) bool {
	var e *MissingChunkError
	return errors.As(err, &e)
}
