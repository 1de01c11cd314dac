package sops

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/getsops/sops/v3/shamir"
)

// MetadataKey is the top-level key of every document that holds the
// file's sops metadata.
const MetadataKey = "sops"

// FormatVersion is the sops version whose format this package writes
// (and against which dev/sopscompat tests it).
const FormatVersion = "3.13.3"

var (
	// ErrNoIdentity: none of the identities opens the file's data key.
	ErrNoIdentity = errors.New("no identity opens the data key")
	// ErrMAC: the MAC does not match the values: something was changed
	// after the file was encrypted.
	ErrMAC = errors.New("the MAC does not match the values")
	// ErrValue: a value does not decrypt.
	ErrValue = errors.New("a value cannot be decrypted")
)

// AgeKey is the data key encrypted for one age recipient.
type AgeKey struct {
	Recipient string
	// Enc is the armored age file holding the data key (or, with several
	// key groups, this group's share of it).
	Enc string
}

// Metadata is a file's "sops" mapping, as far as it is read here.
type Metadata struct {
	Rules
	// KeyGroups hold the age keys of each group. With more than one group
	// the data key is split (Shamir) and ShamirThreshold groups must open.
	KeyGroups       [][]AgeKey
	ShamirThreshold int
	// Others names the keys that are not age (type and public
	// identifier, never key material): they cannot be opened here.
	Others       []string
	LastModified string
	MAC          string
	Version      string
	// Comment rules are not supported (comments are not read): set, they
	// make Decrypt fail.
	EncryptedCommentRegex, UnencryptedCommentRegex string
}

// Recipients names the keys the file is encrypted for: the age
// recipients, then the other keys (public identifiers only).
func (m *Metadata) Recipients() []string {
	var out []string
	for _, g := range m.KeyGroups {
		for _, k := range g {
			out = append(out, k.Recipient)
		}
	}
	return append(out, m.Others...)
}

// File is a loaded SOPS file.
type File struct {
	// Docs are the file's documents without their "sops" key: one for
	// JSON, one per YAML document.
	Docs     []Branch
	Metadata Metadata
	json     bool
}

// isJSON: sops chooses the format by the file's extension.
func isJSON(path string) bool { return strings.EqualFold(filepath.Ext(path), ".json") }

// Load parses an encrypted file: JSON when path ends in .json, else YAML.
// Its errors name keys and lines, never values.
func Load(path string, data []byte) (*File, error) {
	f := &File{json: isJSON(path)}
	var err error
	if f.json {
		f.Docs, err = loadJSON(data)
	} else {
		f.Docs, err = loadYAML(data)
	}
	if err != nil {
		return nil, err
	}
	var md Branch
	for i, d := range f.Docs {
		out := d[:0]
		for _, it := range d {
			if it.Key != MetadataKey {
				out = append(out, it)
				continue
			}
			if i == 0 { // sops reads the first document's
				b, ok := it.Value.(Branch)
				if !ok {
					return nil, errors.New(`the "sops" key is not a mapping`)
				}
				md = b
			}
		}
		f.Docs[i] = out
	}
	if md == nil {
		return nil, errors.New(`no sops metadata (a top-level "sops" key in the first document)`)
	}
	if f.Metadata, err = parseMetadata(md); err != nil {
		return nil, fmt.Errorf("sops metadata: %w", err)
	}
	return f, nil
}

// DataKey opens the file's data key with ids.
func (f *File) DataKey(ids ...age.Identity) ([]byte, error) {
	m := &f.Metadata
	var parts [][]byte
	for _, g := range m.KeyGroups {
		if part := openGroup(g, ids); part != nil {
			parts = append(parts, part)
		}
	}
	switch {
	case len(m.KeyGroups) > 1:
		if len(parts) == 0 || len(parts) < m.ShamirThreshold {
			return nil, ErrNoIdentity
		}
		key, err := shamir.Combine(parts)
		if err != nil {
			return nil, fmt.Errorf("%w: the key groups' shares do not combine", ErrNoIdentity)
		}
		return key, nil
	case len(parts) == 1:
		return parts[0], nil
	}
	return nil, ErrNoIdentity
}

// maxKeySize bounds what is read from an age file holding a data key (32
// bytes, or a 33-byte Shamir share).
const maxKeySize = 1 << 10

func openGroup(g []AgeKey, ids []age.Identity) []byte {
	if len(ids) == 0 {
		return nil
	}
	for _, k := range g {
		r, err := age.Decrypt(armor.NewReader(strings.NewReader(k.Enc)), ids...)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(r, maxKeySize+1))
		if err != nil || len(b) == 0 || len(b) > maxKeySize {
			continue
		}
		return b
	}
	return nil
}

// Decrypt decrypts every encrypted value in place and checks the MAC.
// Errors wrap ErrValue (naming the path) or ErrMAC; none holds a value. On
// an error the documents are partly decrypted: discard the File.
func (f *File) Decrypt(key []byte) error {
	m := &f.Metadata
	if m.EncryptedCommentRegex != "" || m.UnencryptedCommentRegex != "" {
		return errors.New("encrypted_comment_regex and unencrypted_comment_regex are not supported (comments are not read): encrypt the file with encrypted_regex or a suffix rule instead")
	}
	rl, err := newRuler(m.Rules)
	if err != nil {
		return err
	}
	sum := newMAC(m.MACOnlyEncrypted)
	err = walk(f.Docs, func(v any, path []string) (any, error) {
		enc := rl.encrypted(path)
		if enc {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%w: at %s the value is in clear, where the file's rules say it is encrypted", ErrValue, pathString(path))
			}
			if v, err = decryptValue(s, key, additionalData(path)); err != nil {
				return nil, fmt.Errorf("%w: at %s: %v", ErrValue, pathString(path), err)
			}
		}
		if !m.MACOnlyEncrypted || enc {
			if err := sum.add(v); err != nil {
				return nil, fmt.Errorf("at %s: %w", pathString(path), err)
			}
		}
		if _, ok := v.(comment); ok {
			return drop, nil
		}
		return v, nil
	})
	if err != nil {
		return err
	}
	lm, err := time.Parse(time.RFC3339, m.LastModified)
	if err != nil {
		return fmt.Errorf("%w: lastmodified is not a time", ErrMAC)
	}
	stored, err := decryptValue(m.MAC, key, lm.Format(time.RFC3339))
	if err != nil {
		return fmt.Errorf("%w: the MAC itself does not decrypt", ErrMAC)
	}
	s, _ := stored.(string)
	if subtle.ConstantTimeCompare([]byte(s), []byte(sum.sum())) != 1 {
		return ErrMAC
	}
	return nil
}

// Emit writes document i in clear, in the file's format (the "sops" key
// left out).
func (f *File) Emit(i int) ([]byte, error) {
	if f.json {
		return emitJSON(f.Docs[i])
	}
	return emitYAML([]Branch{f.Docs[i]})
}

// Encrypt encrypts a plain file (JSON when path ends in .json, else YAML)
// for age recipients under rules, as `sops --encrypt` does. Comments are
// not kept. The product never encrypts; the dev harness and tests do.
func Encrypt(path string, plain []byte, r Rules, recipients ...string) ([]byte, error) {
	var docs []Branch
	var err error
	json := isJSON(path)
	if json {
		docs, err = loadJSON(plain)
	} else {
		docs, err = loadYAML(plain)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if d.Get(MetadataKey) != nil {
			return nil, errors.New(`the file already has a top-level "sops" key`)
		}
	}
	rl, err := newRuler(r)
	if err != nil {
		return nil, err
	}
	r = rl.r
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	sum := newMAC(r.MACOnlyEncrypted)
	if err := walk(docs, func(v any, path []string) (any, error) {
		enc := rl.encrypted(path)
		if !r.MACOnlyEncrypted || enc {
			if err := sum.add(v); err != nil {
				return nil, err
			}
		}
		if !enc {
			return v, nil
		}
		return encryptValue(v, key, additionalData(path))
	}); err != nil {
		return nil, err
	}
	md := Metadata{Rules: r, Version: FormatVersion, LastModified: time.Now().UTC().Format(time.RFC3339)}
	if md.MAC, err = encryptValue(sum.sum(), key, md.LastModified); err != nil {
		return nil, err
	}
	var group []AgeKey
	for _, rc := range recipients {
		enc, err := encryptKey(rc, key)
		if err != nil {
			return nil, err
		}
		group = append(group, AgeKey{Recipient: rc, Enc: enc})
	}
	md.KeyGroups = [][]AgeKey{group}
	mdb := md.branch()
	for i := range docs {
		docs[i] = append(docs[i], Item{Key: MetadataKey, Value: mdb})
	}
	if json {
		return emitJSON(docs[0])
	}
	return emitYAML(docs)
}

func encryptKey(recipient string, key []byte) (string, error) {
	var rc age.Recipient
	var err error
	if strings.HasPrefix(recipient, "age1pq1") {
		rc, err = age.ParseHybridRecipient(recipient)
	} else {
		rc, err = age.ParseX25519Recipient(recipient)
	}
	if err != nil {
		return "", fmt.Errorf("recipient %q: %w", recipient, err)
	}
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, rc)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(key); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	if err := aw.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}
