// Package bundlecontent is how a BundleDeployment's manifests travel from
// the controller to the agent: the controller renders the Bundle for the
// cluster and stores the result, gzipped, in a Secret named like the
// BundleDeployment in the cluster namespace (readable only by that
// cluster's request identity). The BundleDeployment's deploymentID names the
// content and the options, so the agent knows when to apply again.
package bundlecontent

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

const (
	// SecretType is the type of content Secrets.
	SecretType corev1.SecretType = "fleet.cattle.io/bundle-deployment/v1alpha1"
	// KeyManifests holds the gzipped multi-document YAML.
	KeyManifests = "manifests"
	// KeyManifestID holds the manifest ID the content was stored under.
	KeyManifestID = "manifestID"

	// MaxManifestBytes bounds the uncompressed manifests of one
	// BundleDeployment: what a render may give and an agent accepts. Once
	// gzipped they travel in chunks (chunks.go), so etcd's object size does
	// not bound them; this bounds the memory of the render worker, the
	// controller and the agent that hold them (docs/design/bundle-content.md).
	MaxManifestBytes = 64 << 20
)

// SecretName is the content Secret of a BundleDeployment.
func SecretName(bundleDeployment string) string { return bundleDeployment }

// ManifestID identifies manifests by content: "s-" and their sha256.
func ManifestID(manifests []byte) string {
	sum := sha256.Sum256(manifests)
	return "s-" + hex.EncodeToString(sum[:])
}

// DeploymentID is "<manifestID>:<optionsHash>", as in Fleet.
func DeploymentID(manifestID string, opts fleet.BundleDeploymentOptions) string {
	b, _ := json.Marshal(opts)
	sum := sha256.Sum256(b)
	return manifestID + ":" + hex.EncodeToString(sum[:])
}

// SplitDeploymentID returns the manifest ID of a deployment ID.
func SplitDeploymentID(id string) (manifestID string) {
	m, _, _ := strings.Cut(id, ":")
	return m
}

// Encode returns the content Secret's data for manifests.
func Encode(manifests []byte) (map[string][]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(manifests); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return map[string][]byte{KeyManifests: buf.Bytes(), KeyManifestID: []byte(ManifestID(manifests))}, nil
}

// Decode returns the manifests of a content Secret, checking they are the
// ones the manifest ID names.
func Decode(s *corev1.Secret, wantManifestID string) ([]byte, error) {
	if s.Type != SecretType {
		return nil, fmt.Errorf("secret %s/%s has type %q, want %q", s.Namespace, s.Name, s.Type, SecretType)
	}
	out, err := decode(s)
	if err != nil {
		return nil, err
	}
	if got := ManifestID(out); wantManifestID != "" && got != wantManifestID {
		return nil, fmt.Errorf("secret %s/%s holds manifests %s, the BundleDeployment wants %s (the controller has not written them yet)", s.Namespace, s.Name, got, wantManifestID)
	}
	return out, nil
}

// decode gunzips the inline content of s, bounded by MaxManifestBytes.
func decode(s *corev1.Secret) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(s.Data[KeyManifests]))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: manifests are not gzip: %w", s.Namespace, s.Name, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if len(out) > MaxManifestBytes {
		return nil, errors.New("manifests exceed the size limit")
	}
	return out, nil
}
