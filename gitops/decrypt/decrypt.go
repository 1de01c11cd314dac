// Package decrypt turns the SOPS-encrypted Secrets of a GitRepo path back
// into Secrets, with age identities from a Secret the GitRepo names. It is
// part of the source component: the only place a decryption key and a
// decrypted value meet. It reads no cluster and writes nothing: the
// reconciler hands it a path's manifest files and the key Secret's data,
// and gets back the manifests that go into the Bundle (encrypted files
// removed) and the decrypted Secrets, which it stages with Stage.
//
// The SOPS format (the data key's recovery, the AES-GCM values, the MAC
// check) is gitops/sops, which opens age keys only and is tested against
// sops itself. This package refuses what it must not do: any key but age
// (a KMS, Vault or PGP key named in a committed file would make the source
// component use its ambient cloud credentials or run gpg), identities from
// anywhere but the GitRepo's decryption Secret, and encrypted values in
// anything but a Secret. No error it returns carries a value or key
// material.
//
// The reconciler, for one GitRepo (the steps of each path):
//
//	keys, err := decrypt.KeysFromSecretData(keySecret.Data) // spec.decryption.secretRef, GitRepo's namespace; nil keys without one
//	res, err := decrypt.Decrypt(files, keys)                 // err: that path's error, the other paths go on
//	staged, refs, err := decrypt.Stage(target, res.Secrets)  // err: that path's error
//	// each staged Secret: decrypt.CanWrite(existing, target), then server-side apply;
//	// the Bundle is built from res.Manifests, with refs in spec.downstreamResources;
//	// after a complete scan, delete the Secrets labelled LabelGitRepo=LabelValue(gitrepo)
//	// that no path staged.
package decrypt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/gitops/sops"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// File is one manifest file of a path.
type File struct {
	// Path is the file's path in the repository, for messages.
	Path string
	Data []byte
}

// Secret is a decrypted Secret and the file it came from.
type Secret struct {
	Path   string
	Secret *corev1.Secret
}

// Result is what a path's manifest files become.
type Result struct {
	// Manifests go into the Bundle: every file without SOPS metadata as it
	// was; of an encrypted file, its documents that are not Secrets and hold
	// no encrypted value (the Cluster beside its kubeconfig Secret),
	// re-emitted without the sops metadata.
	Manifests []File
	// Secrets are the path's decrypted Secrets, in file order: every Secret
	// of an encrypted file. They go only to their target (Stage); never log,
	// record or embed them.
	Secrets []Secret
}

// String counts, so that printing a Result by mistake shows no value.
func (r *Result) String() string {
	return fmt.Sprintf("%d manifest files, %d decrypted Secrets", len(r.Manifests), len(r.Secrets))
}

// Encrypted reports whether a manifest file is a SOPS file: a YAML
// document (or the JSON object) of it has a top-level "sops" mapping with a
// MAC. A file that does not parse is not judged here: the Bundle reader
// reports it.
func Encrypted(f File) bool {
	if !bytes.Contains(f.Data, []byte("sops")) {
		return false
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.Data)))
	for {
		d, err := r.Read()
		if err != nil {
			return false
		}
		var top map[string]any
		if yaml.Unmarshal(d, &top) != nil {
			continue
		}
		if m, ok := top["sops"].(map[string]any); ok && m["mac"] != nil {
			return true
		}
	}
}

// Decrypt decrypts every SOPS file of a path with keys (nil when the
// GitRepo names no decryption Secret). Files without SOPS metadata are
// returned as they are. Any error fails the whole path (a path deployed
// without one of its Secrets is worse than one not deployed); the errors
// of all its files are joined, each naming its file.
func Decrypt(files []File, keys *Keys) (*Result, error) {
	r := &Result{}
	var errs []error
	for _, f := range files {
		if !Encrypted(f) {
			r.Manifests = append(r.Manifests, f)
			continue
		}
		plain, secrets, err := decryptFile(f, keys)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.Manifests = append(r.Manifests, plain...)
		r.Secrets = append(r.Secrets, secrets...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// MaxFileSize bounds a SOPS file: it is decoded whole, several times over,
// and no Bundle holds more anyway.
const MaxFileSize = 5 << 20

func decryptFile(f File, keys *Keys) (plain []File, secrets []Secret, err error) {
	if len(f.Data) > MaxFileSize {
		return nil, nil, fmt.Errorf("%s: a SOPS file of %d bytes is larger than %d bytes", f.Path, len(f.Data), MaxFileSize)
	}
	file, err := sops.Load(f.Path, f.Data)
	if err != nil {
		// Load's messages name YAML lines and keys, not values.
		return nil, nil, fmt.Errorf("%s: not a valid SOPS file: %w", f.Path, err)
	}
	if keys == nil {
		return nil, nil, fmt.Errorf("%s: encrypted with SOPS for %s, but the GitRepo names no decryption Secret (spec.decryption.secretRef)", f.Path, recipientsOf(file.Metadata))
	}
	encrypted := make([]bool, len(file.Docs))
	for i, d := range file.Docs {
		encrypted[i] = holdsCiphertext(d)
	}
	dataKey, err := file.DataKey(keys.identities...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: no identity of the decryption Secret opens this SOPS file: it is encrypted for %s, the Secret holds identities for %s; add the identity of one of those recipients under a data key ending in %q, or encrypt the file for one of the Secret's recipients (sops updatekeys)",
			f.Path, recipientsOf(file.Metadata), strings.Join(keys.Recipients(), ", "), KeySuffix)
	}
	switch err := file.Decrypt(dataKey); {
	case errors.Is(err, sops.ErrMAC):
		return nil, nil, fmt.Errorf("%s: integrity check failed (the SOPS MAC does not match): a value, key or the sops metadata was changed after the file was encrypted; edit the file with sops (sops edit) or encrypt it again", f.Path)
	case errors.Is(err, sops.ErrValue):
		// The message names the value's path, never the value.
		return nil, nil, fmt.Errorf("%s: %v: it was changed after the file was encrypted, or written in clear where SOPS expects ciphertext; edit the file with sops (sops edit) or encrypt it again", f.Path, err)
	case err != nil:
		return nil, nil, fmt.Errorf("%s: not a valid SOPS file: %w", f.Path, err)
	}
	for i, d := range file.Docs {
		doc, err := file.Emit(i)
		if err != nil {
			return nil, nil, fmt.Errorf("%s, document %d: %w", f.Path, i+1, err)
		}
		apiVersion, kind := stringAt(d, "apiVersion"), stringAt(d, "kind")
		switch {
		case apiVersion == "v1" && kind == "Secret":
			s := &corev1.Secret{}
			if err := strictyaml.Unmarshal(doc, s); err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: not a valid Secret: %w", f.Path, i+1, err)
			}
			if s.Name == "" {
				return nil, nil, fmt.Errorf("%s, document %d: the Secret has no metadata.name", f.Path, i+1)
			}
			secrets = append(secrets, Secret{Path: f.Path, Secret: s})
		case encrypted[i]:
			// Decrypted values go only where Secrets go: a ConfigMap or any
			// other object would put them in the Bundle, readable by whoever
			// reads Bundles.
			return nil, nil, fmt.Errorf("%s, document %d: %s %q holds SOPS-encrypted values, but only Secrets (apiVersion v1, kind Secret) may: decrypted values never go into a Bundle; move the values into a Secret, or leave this object unencrypted (encrypted_regex: ^(data|stringData)$)", f.Path, i+1, describe(kind), stringAt(d, "metadata", "name"))
		default:
			plain = append(plain, File{Path: f.Path, Data: doc})
		}
	}
	return plain, secrets, nil
}

func describe(kind string) string {
	if kind == "" {
		return "a document without kind"
	}
	return kind
}

// stringAt is the string at a path of top-level keys of a document, "" if
// there is none.
func stringAt(b sops.Branch, path ...string) string {
	var cur any = b
	for _, p := range path {
		br, ok := cur.(sops.Branch)
		if !ok {
			return ""
		}
		cur = br.Get(p)
	}
	s, _ := cur.(string)
	return s
}

// holdsCiphertext reports whether a document has a SOPS-encrypted value.
func holdsCiphertext(v any) bool {
	switch v := v.(type) {
	case sops.Branch:
		for _, it := range v {
			if holdsCiphertext(it.Value) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if holdsCiphertext(e) {
				return true
			}
		}
	default:
		return sops.IsEncrypted(v)
	}
	return false
}

// recipientsOf names the keys a SOPS file is encrypted for: age
// recipients, or the type and identifier of any other key (a KMS ARN, a
// PGP fingerprint): public names, never key material.
func recipientsOf(md sops.Metadata) string {
	if r := md.Recipients(); len(r) > 0 {
		return strings.Join(r, ", ")
	}
	return "no key"
}
