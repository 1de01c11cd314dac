package controller

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/decrypt"
)

// stagedSecrets are the decrypted Secrets of one Bundle, to write into the
// GitRepo's namespace, and where they go.
type stagedSecrets struct {
	target  decrypt.Target
	secrets []*corev1.Secret
}

// decrypt decrypts the SOPS files among each Bundle's resources (the
// reader hands every file of a path over as a resource): the encrypted
// files are replaced by what may go into the Bundle, the decrypted Secrets
// staged and named in downstreamResources. A path that fails is removed
// from res (its Bundle is not written) and returned as a path error.
func (p *pass) decrypt(ctx context.Context, res *bundlereader.Result, keys *decrypt.Keys) (map[string]*stagedSecrets, []*bundlereader.PathError) {
	staged := map[string]*stagedSecrets{}
	var errs []*bundlereader.PathError
	var reserved []string
	reservedRead := false
	kept := res.Bundles[:0]
	for _, b := range res.Bundles {
		enc, err := encryptedFiles(b)
		if err == nil && len(enc) == 0 {
			kept = append(kept, b)
			continue
		}
		if err == nil && !reservedRead {
			reserved, err = p.reservedSecrets(ctx)
			reservedRead = err == nil
		}
		var st *stagedSecrets
		if err == nil {
			st, err = p.decryptBundle(b, enc, keys, reserved)
		}
		if err != nil {
			errs = append(errs, &bundlereader.PathError{Path: b.Path, Err: err})
			continue
		}
		staged[b.Bundle.Name] = st
		kept = append(kept, b)
	}
	res.Bundles = kept
	return staged, errs
}

// encrypted is one SOPS file among a Bundle's resources.
type encrypted struct {
	index int
	file  decrypt.File
}

func encryptedFiles(b bundlereader.Bundle) ([]encrypted, error) {
	var out []encrypted
	for i, r := range b.Bundle.Spec.Resources {
		ext := path.Ext(r.Name)
		if ext != ".yaml" && ext != ".yml" && ext != ".json" {
			continue
		}
		data, err := decodeResource(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(b.Path, r.Name), err)
		}
		if !bytes.Contains(data, []byte("sops")) {
			continue
		}
		f := decrypt.File{Path: path.Join(b.Path, r.Name), Data: data}
		if decrypt.Encrypted(f) {
			out = append(out, encrypted{index: i, file: f})
		}
	}
	return out, nil
}

func (p *pass) decryptBundle(b bundlereader.Bundle, enc []encrypted, keys *decrypt.Keys, reserved []string) (*stagedSecrets, error) {
	files := make([]decrypt.File, len(enc))
	for i, e := range enc {
		files[i] = e.file
	}
	out, err := decrypt.Decrypt(files, keys)
	if err != nil {
		return nil, err
	}
	manifests := map[string][]byte{}
	for _, m := range out.Manifests {
		manifests[m.Path] = m.Data
	}
	drop := map[int]bool{}
	for _, e := range enc {
		data, ok := manifests[e.file.Path]
		if !ok || len(bytes.TrimSpace(data)) == 0 {
			drop[e.index] = true
			continue
		}
		b.Bundle.Spec.Resources[e.index] = fleet.BundleResource{Name: b.Bundle.Spec.Resources[e.index].Name, Content: string(data)}
	}
	if len(drop) > 0 {
		kept := b.Bundle.Spec.Resources[:0]
		for i, r := range b.Bundle.Spec.Resources {
			if !drop[i] {
				kept = append(kept, r)
			}
		}
		b.Bundle.Spec.Resources = kept
	}
	target := decrypt.Target{
		GitRepo:    types.NamespacedName{Namespace: p.repo.Namespace, Name: p.repo.Name},
		GitRepoUID: p.repo.UID,
		Bundle:     b.Bundle.Name,
		Namespace:  deployNamespace(&b.Bundle.Spec),
		Reserved:   reserved,
	}
	secrets, refs, err := decrypt.Stage(target, out.Secrets)
	if err != nil {
		return nil, err
	}
	b.Bundle.Spec.DownstreamResources = append(b.Bundle.Spec.DownstreamResources, refs...)
	return &stagedSecrets{target: target, secrets: secrets}, nil
}

// deployNamespace is where the Bundle deploys: its namespace option, else
// defaultNamespace, else "default".
func deployNamespace(spec *fleet.BundleSpec) string {
	switch {
	case spec.TargetNamespace != "":
		return spec.TargetNamespace
	case spec.DefaultNamespace != "":
		return spec.DefaultNamespace
	}
	return "default"
}

// reservedSecrets are the kubeconfig Secrets of the workspace's Clusters,
// which the controller never copies downstream.
func (p *pass) reservedSecrets(ctx context.Context) ([]string, error) {
	list := &fleet.ClusterList{}
	if err := p.r.client.List(ctx, list, client.InNamespace(p.repo.Namespace)); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list.Items {
		ns := c.Spec.KubeConfigSecretNamespace
		if ns == "" {
			ns = c.Namespace
		}
		if c.Spec.KubeConfigSecret != "" && ns == p.repo.Namespace {
			out = append(out, c.Spec.KubeConfigSecret)
		}
	}
	return out, nil
}

// decodeResource is a resource's content, at most decrypt.MaxFileSize.
func decodeResource(r fleet.BundleResource) ([]byte, error) {
	switch r.Encoding {
	case "":
		return []byte(r.Content), nil
	case "base64", "base64+gz":
		raw, err := base64.StdEncoding.DecodeString(r.Content)
		if err != nil {
			return nil, fmt.Errorf("content is not base64: %w", err)
		}
		if r.Encoding == "base64" {
			return raw, nil
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("content is not gzip: %w", err)
		}
		defer zr.Close()
		data, err := io.ReadAll(io.LimitReader(zr, decrypt.MaxFileSize+1))
		if err != nil {
			return nil, err
		}
		if len(data) > decrypt.MaxFileSize {
			// Not decrypted: the reader would have refused it as a resource
			// anyway if it were too large for the Bundle.
			return nil, nil
		}
		return data, nil
	}
	return nil, fmt.Errorf("unknown encoding %q", strings.TrimSpace(r.Encoding))
}
