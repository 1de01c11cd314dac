package bundlecontent

// Content of any size. A content Secret holds its manifests inline when
// they fit, gzipped, in one Secret (as it always did, so agents that know
// nothing of chunks read it). Larger content is cut into chunks: the gzip
// stream in pieces of at most MaxChunkBytes, each in an immutable chunk
// Secret of the cluster namespace named after the BundleDeployment and the
// manifest ID, and the content Secret holds only the index (KeyChunks):
// which chunks, in which order, each one's length and sha256. The writer
// creates the chunks before the index names them; the reader checks each
// chunk against the index before it uses a byte of it, and the whole
// against the manifest ID.

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gitops-fleet/fleet/internal/names"
)

const (
	// KeyChunks holds the index of chunked content (JSON, Index), in the
	// content Secret, in place of KeyManifests.
	KeyChunks = "chunks"
	// ChunkSecretType is the type of chunk Secrets.
	ChunkSecretType corev1.SecretType = "fleet.cattle.io/bundle-content-chunk/v1alpha1"
	// KeyChunk holds a chunk's bytes: a piece of the gzip stream.
	KeyChunk = "chunk"
	// ChunkLabel with value "true" marks chunk Secrets. They also carry the
	// labels fleet.BundleLabel and fleet.BundleNamespaceLabel of their
	// BundleDeployment (named like its Bundle).
	ChunkLabel = "fleet.cattle.io/bundle-content-chunk"

	// MaxChunkBytes is the longest chunk, and the longest gzip stream a
	// content Secret holds inline. Kubernetes refuses a Secret whose data
	// exceeds 1 MiB, etcd a request over 1.5 MiB; what is left of the MiB
	// is room for the other key and the metadata.
	MaxChunkBytes = 960 << 10
	// MaxChunks is the most chunks an index may name: enough for
	// MaxManifestBytes that do not compress at all.
	MaxChunks = (MaxManifestBytes + MaxManifestBytes/100 + MaxChunkBytes - 1) / MaxChunkBytes

	indexVersion = 1
)

// Layout is one kind of chunked content: the type of the Secret that holds
// it (inline, or the index of its chunks), the type and the names of its
// chunks. The format, the cut and the checks are the same for every kind;
// only the names and types differ, so a Secret of one kind is never read as
// the other.
type Layout struct {
	// SecretType is the type of the Secret holding the content inline or
	// its index.
	SecretType corev1.SecretType
	// ChunkType is the type of chunk Secrets.
	ChunkType corev1.SecretType
	// ChunkName names chunk i of content id of owner (the only names an
	// index may give).
	ChunkName func(owner, id string, i int) string
	// Reader is who reads this content, for the message of an index of a
	// version it does not read ("the agent").
	Reader string
	// Rewrite tells a person how a changed chunk is written again.
	Rewrite string
}

// Deployment is the layout of a BundleDeployment's content: the content
// Secret named like the BundleDeployment in the cluster namespace and its
// chunks there (ChunkSecretName), written by the controller, read by the
// agent.
var Deployment = Layout{
	SecretType: SecretType,
	ChunkType:  ChunkSecretType,
	ChunkName:  ChunkSecretName,
	Reader:     "agent",
	Rewrite:    "it was changed after the controller wrote it; delete it and the controller writes it again",
}

// Index is what the content Secret of chunked content holds under KeyChunks.
type Index struct {
	// Version of this layout: 1.
	Version int `json:"version"`
	// ManifestID names the manifests the chunks hold, put together in order
	// and gunzipped.
	ManifestID string `json:"manifestID"`
	// Size is the gzip stream's length: the sum of the chunks' sizes.
	Size int64 `json:"size"`
	// Chunks are the pieces of the gzip stream, in order.
	Chunks []ChunkRef `json:"chunks"`
}

// ChunkRef is one chunk of an Index.
type ChunkRef struct {
	// Name is the chunk Secret's name (ChunkSecretName).
	Name string `json:"name"`
	// SHA256 is the hex sha256 of the chunk's bytes.
	SHA256 string `json:"sha256"`
	// Size is the chunk's length in bytes.
	Size int `json:"size"`
}

// Chunk is a chunk Secret's content, as the writer makes it.
type Chunk struct {
	Name   string
	SHA256 string
	Data   []byte
}

// Encoded is a BundleDeployment's content ready to be written.
type Encoded struct {
	// ManifestID names the manifests.
	ManifestID string
	// Data is the content Secret's data: the manifests inline, or the index
	// of the chunks.
	Data map[string][]byte
	// Chunks are the chunk Secrets' contents, in order; none for content
	// held inline. They must exist before Data is written.
	Chunks []Chunk
	// Size is the gzip stream's length.
	Size int
}

// ChunkSecretName is the name of chunk i of the content manifestID of
// BundleDeployment bundleDeployment: the manifest ID in the name makes the
// chunks of one content distinct from those of the next, so the content in
// force stays whole while the next one is written.
func ChunkSecretName(bundleDeployment, manifestID string, i int) string {
	id := strings.TrimPrefix(manifestID, "s-")
	if len(id) > 16 {
		id = id[:16]
	}
	return names.SafeConcatName(bundleDeployment, "content", id, strconv.Itoa(i))
}

// EncodeContent compresses manifests for BundleDeployment bundleDeployment:
// inline when the gzip stream fits in one Secret (byte for byte what Encode
// gives), otherwise as chunks and their index.
func EncodeContent(bundleDeployment string, manifests []byte) (*Encoded, error) {
	if len(manifests) > MaxManifestBytes {
		return nil, fmt.Errorf("the manifests are %d bytes, more than the %d bytes a BundleDeployment's content may hold", len(manifests), MaxManifestBytes)
	}
	return Deployment.Encode(bundleDeployment, manifests)
}

// Encode compresses data, the content of owner: inline when the gzip stream
// fits in one Secret, otherwise as chunks (named by l.ChunkName) and their
// index.
func (l Layout) Encode(owner string, manifests []byte) (*Encoded, error) {
	if len(manifests) > MaxManifestBytes {
		return nil, fmt.Errorf("the content is %d bytes, more than the %d bytes one content may hold", len(manifests), MaxManifestBytes)
	}
	data, err := Encode(manifests)
	if err != nil {
		return nil, err
	}
	id := string(data[KeyManifestID])
	gz := data[KeyManifests]
	if len(gz) <= MaxChunkBytes {
		return &Encoded{ManifestID: id, Data: data, Size: len(gz)}, nil
	}
	out := &Encoded{ManifestID: id, Size: len(gz)}
	idx := Index{Version: indexVersion, ManifestID: id, Size: int64(len(gz))}
	for i := 0; len(gz) > 0; i++ {
		n := min(len(gz), MaxChunkBytes)
		piece := gz[:n:n]
		gz = gz[n:]
		sum := sha256.Sum256(piece)
		c := Chunk{Name: l.ChunkName(owner, id, i), SHA256: hex.EncodeToString(sum[:]), Data: piece}
		out.Chunks = append(out.Chunks, c)
		idx.Chunks = append(idx.Chunks, ChunkRef{Name: c.Name, SHA256: c.SHA256, Size: n})
	}
	b, err := json.Marshal(idx)
	if err != nil {
		return nil, err
	}
	out.Data = map[string][]byte{KeyChunks: b, KeyManifestID: []byte(id)}
	return out, nil
}

// IsChunked reports whether a content Secret holds an index of chunks.
func IsChunked(s *corev1.Secret) bool {
	_, ok := s.Data[KeyChunks]
	return ok
}

// InvalidError is content that cannot be read as it is: a malformed index,
// a chunk that is not the one the index names (tampered with, or not
// written by the controller), manifests that are not the ones named. Only
// new content helps.
type InvalidError struct{ Message string }

func (e *InvalidError) Error() string { return e.Message }

// MissingChunkError is a chunk the index names that does not exist (yet, or
// any more: the controller writes the next content's chunks before its
// index and deletes the previous ones after).
type MissingChunkError struct{ Namespace, Name string }

func (e *MissingChunkError) Error() string {
	return fmt.Sprintf("chunk secret %s/%s does not exist", e.Namespace, e.Name)
}

// GetSecret reads a Secret of the content Secret's namespace by name.
type GetSecret func(ctx context.Context, name string) (*corev1.Secret, error)

// Read returns the manifests of content Secret s of BundleDeployment
// bundleDeployment, inline or chunked, checking they are the ones the
// manifest ID names (wantManifestID "": whatever the content Secret says it
// holds). Chunks are read one at a time through get and checked against the
// index before their bytes are used. Errors: *InvalidError,
// *MissingChunkError, a *StaleError when the content Secret holds other
// manifests, or get's error.
func Read(ctx context.Context, s *corev1.Secret, bundleDeployment, wantManifestID string, get GetSecret) ([]byte, error) {
	return Deployment.Read(ctx, s, bundleDeployment, wantManifestID, get)
}

// Read returns the content of Secret s of owner, inline or chunked, as the
// package-level Read does for a BundleDeployment's.
func (l Layout) Read(ctx context.Context, s *corev1.Secret, owner, wantManifestID string, get GetSecret) ([]byte, error) {
	if s.Type != l.SecretType {
		return nil, &InvalidError{fmt.Sprintf("secret %s/%s has type %q, want %q", s.Namespace, s.Name, s.Type, l.SecretType)}
	}
	if !IsChunked(s) {
		out, err := decode(s)
		if err != nil {
			return nil, &InvalidError{err.Error()}
		}
		if got := ManifestID(out); wantManifestID != "" && got != wantManifestID {
			return nil, &StaleError{Secret: s.Namespace + "/" + s.Name, Holds: got, Want: wantManifestID}
		}
		return out, nil
	}
	idx, err := l.parseIndex(s, owner)
	if err != nil {
		return nil, err
	}
	if wantManifestID != "" && idx.ManifestID != wantManifestID {
		return nil, &StaleError{Secret: s.Namespace + "/" + s.Name, Holds: idx.ManifestID, Want: wantManifestID}
	}
	cr := &chunkReader{ctx: ctx, ns: s.Namespace, idx: idx, get: get, layout: l}
	zr, err := gzip.NewReader(cr)
	if err != nil {
		return nil, contentError(cr, fmt.Errorf("the chunks of secret %s/%s are not gzip: %w", s.Namespace, s.Name, err))
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, MaxManifestBytes+1))
	if err != nil {
		return nil, contentError(cr, fmt.Errorf("the chunks of secret %s/%s: %w", s.Namespace, s.Name, err))
	}
	if len(out) > MaxManifestBytes {
		return nil, &InvalidError{fmt.Sprintf("the chunks of secret %s/%s hold more than %d bytes of manifests", s.Namespace, s.Name, MaxManifestBytes)}
	}
	if cr.i != len(idx.Chunks) || len(cr.cur) > 0 {
		return nil, &InvalidError{fmt.Sprintf("the chunks of secret %s/%s hold more than their gzip stream", s.Namespace, s.Name)}
	}
	if got := ManifestID(out); got != idx.ManifestID {
		return nil, &InvalidError{fmt.Sprintf("the chunks of secret %s/%s hold manifests %s, not %s as the index says", s.Namespace, s.Name, got, idx.ManifestID)}
	}
	return out, nil
}

// StaleError is a content Secret that holds other manifests than the
// BundleDeployment names: the controller has not written them yet.
type StaleError struct{ Secret, Holds, Want string }

func (e *StaleError) Error() string {
	return fmt.Sprintf("secret %s holds manifests %s, the BundleDeployment wants %s (the controller has not written them yet)", e.Secret, e.Holds, e.Want)
}

// contentError is the error of a failed gzip read: the chunk reader's own
// failure (a missing or invalid chunk, an API error) when it had one,
// otherwise the stream is broken.
func contentError(cr *chunkReader, err error) error {
	if cr.err != nil {
		return cr.err
	}
	return &InvalidError{err.Error()}
}

// parseIndex reads and checks the index of a chunked content Secret: the
// chunk names are the ones the writer gives, so an index cannot make the
// reader read another Secret; sizes and count are bounded.
func (l Layout) parseIndex(s *corev1.Secret, owner string) (*Index, error) {
	bad := func(format string, args ...any) error {
		return &InvalidError{fmt.Sprintf("secret %s/%s: the index of chunks ", s.Namespace, s.Name) + fmt.Sprintf(format, args...)}
	}
	idx := &Index{}
	if err := json.Unmarshal(s.Data[KeyChunks], idx); err != nil {
		return nil, bad("is not JSON: %v", err)
	}
	switch {
	case idx.Version != indexVersion:
		return nil, bad("has version %d; this %s reads version %d (upgrade the %s)", idx.Version, l.Reader, indexVersion, l.Reader)
	case !strings.HasPrefix(idx.ManifestID, "s-") || string(s.Data[KeyManifestID]) != idx.ManifestID:
		return nil, bad("names manifests %q, the secret %q", idx.ManifestID, s.Data[KeyManifestID])
	case len(idx.Chunks) == 0 || len(idx.Chunks) > MaxChunks:
		return nil, bad("names %d chunks (1 to %d)", len(idx.Chunks), MaxChunks)
	}
	var total int64
	for i, c := range idx.Chunks {
		if want := l.ChunkName(owner, idx.ManifestID, i); c.Name != want {
			return nil, bad("names chunk %d %q, not %q", i, c.Name, want)
		}
		if c.Size <= 0 || c.Size > MaxChunkBytes || len(c.SHA256) != sha256.Size*2 {
			return nil, bad("gives chunk %s a size of %d or a malformed sha256", c.Name, c.Size)
		}
		total += int64(c.Size)
	}
	if total != idx.Size {
		return nil, bad("sizes add up to %d, not %d", total, idx.Size)
	}
	return idx, nil
}

// chunkReader reads the gzip stream chunk by chunk, each Secret read when
// the stream reaches it and checked (type, size, sha256) before any of its
// bytes are returned. It remembers its own failure, which gzip may hide.
type chunkReader struct {
	ctx context.Context
	ns  string
	idx *Index
	get GetSecret
	// layout says the chunks' type and how to write one again.
	layout Layout
	i      int // the next chunk to read
	cur    []byte
	err    error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.i == len(r.idx.Chunks) {
			return 0, io.EOF
		}
		if r.cur, r.err = r.chunk(r.idx.Chunks[r.i]); r.err != nil {
			return 0, r.err
		}
		r.i++
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *chunkReader) chunk(c ChunkRef) ([]byte, error) {
	s, err := r.get(r.ctx, c.Name)
	if apierrors.IsNotFound(err) {
		return nil, &MissingChunkError{Namespace: r.ns, Name: c.Name}
	}
	if err != nil {
		return nil, fmt.Errorf("reading chunk secret %s/%s: %w", r.ns, c.Name, err)
	}
	data := s.Data[KeyChunk]
	sum := sha256.Sum256(data)
	switch {
	case s.Type != r.layout.ChunkType:
		return nil, &InvalidError{fmt.Sprintf("chunk secret %s/%s has type %q, want %q", r.ns, c.Name, s.Type, r.layout.ChunkType)}
	case len(data) != c.Size || hex.EncodeToString(sum[:]) != c.SHA256:
		return nil, &InvalidError{fmt.Sprintf("chunk secret %s/%s of content %s does not match its digest in the index (%d bytes, sha256 %s…; the index says %d bytes, sha256 %s…): %s",
			r.ns, c.Name, shortHex16(r.idx.ManifestID), len(data), shortHex(sum[:]), c.Size, shortHex16(c.SHA256), r.layout.Rewrite)}
	}
	return data, nil
}

func shortHex(b []byte) string { return hex.EncodeToString(b)[:16] }

func shortHex16(s string) string {
	if len(s) > 16 {
		return s[:16]
	}
	return s
}
