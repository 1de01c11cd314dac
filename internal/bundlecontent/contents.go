package bundlecontent

// A Bundle's contents (its spec.resources) kept in the Bundle's namespace
// when they do not fit in the Bundle: the JSON list of BundleResource,
// gzipped and cut exactly as a BundleDeployment's content (Layout), in
// Secrets of their own types and names. The Bundle says where they are with
// spec.contentsId: "s-" and the sha256 of that JSON (Fleet's field: "the
// resources are elsewhere, under this ID"). The writer is
// internal/bundlecontents; the readers are the controller and fleet's CLI.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/names"
)

const (
	// ContentsSecretType is the type of the Secret holding a Bundle's
	// contents inline or the index of their chunks.
	ContentsSecretType corev1.SecretType = "fleet.cattle.io/bundle-contents/v1alpha1"
	// ContentsChunkType is the type of a Bundle's contents chunks.
	ContentsChunkType corev1.SecretType = "fleet.cattle.io/bundle-contents-chunk/v1alpha1"
	// ContentsLabel with value "true" marks the Secrets of a Bundle's
	// contents (index and chunks). They also carry fleet.BundleLabel and
	// fleet.BundleNamespaceLabel of their Bundle.
	ContentsLabel = "fleet.cattle.io/bundle-contents"
	// ContentsIDAnnotation on a contents Secret is the contentsId it
	// belongs to.
	ContentsIDAnnotation = "fleet.cattle.io/contents-id"
)

// Contents is the layout of a Bundle's contents: the index Secret
// ContentsSecretName and its chunks ContentsChunkName in the Bundle's
// namespace, written by whoever writes the Bundle (fleet apply, the GitRepo
// source), read by the controller.
var Contents = Layout{
	SecretType: ContentsSecretType,
	ChunkType:  ContentsChunkType,
	ChunkName:  ContentsChunkName,
	Reader:     "controller",
	Rewrite:    "it was changed after the Bundle's writer wrote it; delete it and write the Bundle again (fleet apply, or a new commit of the GitRepo)",
}

func contentsID16(contentsID string) string {
	id := strings.TrimPrefix(contentsID, "s-")
	if len(id) > 16 {
		id = id[:16]
	}
	return id
}

// ContentsSecretName is the Secret holding the contents contentsID of
// Bundle bundle (inline, or the index of their chunks).
func ContentsSecretName(bundle, contentsID string) string {
	return names.SafeConcatName(bundle, "contents", contentsID16(contentsID))
}

// ContentsChunkName is chunk i of the contents contentsID of Bundle bundle.
func ContentsChunkName(bundle, contentsID string, i int) string {
	return names.SafeConcatName(bundle, "contents", contentsID16(contentsID), strconv.Itoa(i))
}

// ContentsID is the contentsId of resources: "s-" and the sha256 of their
// JSON, the same sum the controller reports as status.resourcesSha256Sum.
func ContentsID(resources []fleet.BundleResource) (string, []byte, error) {
	data, err := json.Marshal(resources)
	if err != nil {
		return "", nil, err
	}
	return ManifestID(data), data, nil
}

// EncodeContents encodes the resources of Bundle bundle as contents:
// their contentsId and the Secrets' data and chunks.
func EncodeContents(bundle string, resources []fleet.BundleResource) (*Encoded, error) {
	_, data, err := ContentsID(resources)
	if err != nil {
		return nil, err
	}
	return Contents.Encode(bundle, data)
}

// ReadContents reads the resources of the contents contentsID of Bundle
// bundle through get (Secrets of the Bundle's namespace), checking every
// chunk against the index before its bytes are used and the whole against
// contentsID. Errors: *MissingChunkError (the index Secret or a chunk does
// not exist), *InvalidError (a Secret that is not what the index or the
// contentsId names: named in the message), or get's error.
func ReadContents(ctx context.Context, namespace, bundle, contentsID string, get GetSecret) ([]fleet.BundleResource, error) {
	if !strings.HasPrefix(contentsID, "s-") || len(contentsID) != 2+64 {
		return nil, &InvalidError{fmt.Sprintf("contentsId %q is not \"s-\" and the sha256 of the resources' JSON", contentsID)}
	}
	name := ContentsSecretName(bundle, contentsID)
	s, err := get(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil, &MissingChunkError{Namespace: namespace, Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("reading contents secret %s/%s: %w", namespace, name, err)
	}
	data, err := Contents.Read(ctx, s, bundle, contentsID, get)
	if stale, ok := err.(*StaleError); ok {
		return nil, &InvalidError{fmt.Sprintf("secret %s holds contents %s, not %s as its name says", stale.Secret, stale.Holds, stale.Want)}
	}
	if err != nil {
		return nil, err
	}
	var res []fleet.BundleResource
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, &InvalidError{fmt.Sprintf("the contents in secret %s/%s are not a JSON list of resources: %v", namespace, name, err)}
	}
	return res, nil
}
