// Package sops reads and writes files in the SOPS format (getsops/sops,
// format version 3) whose data key is encrypted for age recipients: YAML
// (one or more documents) and JSON. It is the format only, with the
// cryptography of well-kept libraries: age (filippo.io/age) opens the data
// key, the standard library's AES-GCM the values, SHA-512 the MAC, and
// sops' own shamir package joins the shares of several key groups.
//
// Why not sops' library: its root package imports every key source it
// supports (AWS, GCP, Azure, HashiCorp Vault, Huawei Cloud, PGP), about 540
// packages that the product would link and never call, since fleet only
// ever opens age keys. Compatibility with sops itself is tested both ways
// (files sops writes are read here, files written here are read by sops)
// in the dev/sopscompat module, which CI runs.
//
// What sops files may hold that is refused here, with an error saying so:
// encrypted_comment_regex and unencrypted_comment_regex (comments are not
// read), and keys that are not strings.
package sops

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Branch is a mapping in file order.
type Branch []Item

// Item is one key of a Branch. Value is a Branch, a []any, or a scalar:
// string, int, float64, bool, time.Time or nil.
type Item struct {
	Key   string
	Value any
}

// Get is the value of key in b (nil if it has none).
func (b Branch) Get(key string) any {
	for _, it := range b {
		if it.Key == key {
			return it.Value
		}
	}
	return nil
}

// Rules say which values are encrypted: those whose path (the keys from
// the document's root) matches. At most one of the four may be set; none
// is UnencryptedSuffix "_unencrypted", as in sops.
type Rules struct {
	UnencryptedSuffix string
	EncryptedSuffix   string
	UnencryptedRegex  string
	EncryptedRegex    string
	// MACOnlyEncrypted: the MAC covers only the encrypted values, so the
	// values left in clear may be edited without sops.
	MACOnlyEncrypted bool
}

// DefaultUnencryptedSuffix is sops' rule when a file sets none.
const DefaultUnencryptedSuffix = "_unencrypted"

// ruler decides per path; its regular expressions are compiled once.
type ruler struct {
	r                    Rules
	encRegex, unencRegex *regexp.Regexp
}

func newRuler(r Rules) (*ruler, error) {
	n := 0
	for _, s := range []string{r.UnencryptedSuffix, r.EncryptedSuffix, r.UnencryptedRegex, r.EncryptedRegex} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("more than one of unencrypted_suffix, encrypted_suffix, unencrypted_regex and encrypted_regex is set: sops allows one")
	}
	if n == 0 {
		r.UnencryptedSuffix = DefaultUnencryptedSuffix
	}
	rl := &ruler{r: r}
	var err error
	if r.EncryptedRegex != "" {
		if rl.encRegex, err = regexp.Compile(r.EncryptedRegex); err != nil {
			return nil, fmt.Errorf("encrypted_regex: %w", err)
		}
	}
	if r.UnencryptedRegex != "" {
		if rl.unencRegex, err = regexp.Compile(r.UnencryptedRegex); err != nil {
			return nil, fmt.Errorf("unencrypted_regex: %w", err)
		}
	}
	return rl, nil
}

// encrypted reports whether the value at path is (or is to be) encrypted:
// sops' rule, for files without comment rules.
func (rl *ruler) encrypted(path []string) bool {
	switch {
	case rl.r.UnencryptedSuffix != "":
		for _, k := range path {
			if strings.HasSuffix(k, rl.r.UnencryptedSuffix) {
				return false
			}
		}
		return true
	case rl.r.EncryptedSuffix != "":
		for _, k := range path {
			if strings.HasSuffix(k, rl.r.EncryptedSuffix) {
				return true
			}
		}
		return false
	case rl.unencRegex != nil:
		for _, k := range path {
			if rl.unencRegex.MatchString(k) {
				return false
			}
		}
		return true
	case rl.encRegex != nil:
		for _, k := range path {
			if rl.encRegex.MatchString(k) {
				return true
			}
		}
		return false
	}
	return true
}

// walk calls leaf for every scalar of docs, in file order, with its path,
// and replaces it by what leaf returns; a leaf that returns drop is
// removed (a list item or a key). nil values are not leaves (sops neither
// encrypts nor MACs them).
func walk(docs []Branch, leaf func(v any, path []string) (any, error)) error {
	for i := range docs {
		b, err := walkBranch(docs[i], nil, leaf)
		if err != nil {
			return err
		}
		docs[i] = b
	}
	return nil
}

// drop, returned by a leaf, removes the value (a comment sops encrypted as
// a list item or a value: it holds no data).
type dropT struct{}

var drop = dropT{}

func walkValue(v any, path []string, leaf func(any, []string) (any, error)) (any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case Branch:
		return walkBranch(v, path, leaf)
	case []any:
		out := v[:0]
		for _, e := range v {
			w, err := walkValue(e, path, leaf)
			if err != nil {
				return nil, err
			}
			if w != drop {
				out = append(out, w)
			}
		}
		return out, nil
	case string, int, float64, bool, time.Time:
		return leaf(v, path)
	default:
		return nil, fmt.Errorf("at %s: a value of type %T is not supported", pathString(path), v)
	}
}

func walkBranch(b Branch, path []string, leaf func(any, []string) (any, error)) (Branch, error) {
	out := b[:0]
	for _, it := range b {
		p := append(path[:len(path):len(path)], it.Key)
		w, err := walkValue(it.Value, p, leaf)
		if err != nil {
			return nil, err
		}
		if w != drop {
			out = append(out, Item{Key: it.Key, Value: w})
		}
	}
	return out, nil
}

// additionalData is what a value's AES-GCM authenticates besides the value:
// its path, so a value moved to another key does not decrypt.
func additionalData(path []string) string { return strings.Join(path, ":") + ":" }

// pathString names a path in messages: keys only, never values.
func pathString(path []string) string {
	if len(path) == 0 {
		return "the document's root"
	}
	return strings.Join(path, ".")
}
