package decrypt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"filippo.io/age"
)

// KeySuffix ends the keys of a decryption Secret's data that hold age
// identities (as Flux's kustomize-controller names them); other keys are
// ignored.
const KeySuffix = ".agekey"

// Keys are the age identities of one decryption Secret. They never leave
// this package: no method returns or prints key material, only the public
// recipients.
type Keys struct {
	identities []age.Identity
	recipients []string
}

// KeysFromSecretData parses the age identities in the values of the keys of
// data ending in KeySuffix: one identity per line, empty lines and lines
// starting with # ignored (what age-keygen writes). Only native age
// identities (X25519 and the post-quantum hybrid) are accepted: plugin
// identities would run a program, and SSH keys are refused to keep one key
// format. An error names the data key and line, never its content.
func KeysFromSecretData(data map[string][]byte) (*Keys, error) {
	k := &Keys{}
	names := make([]string, 0, len(data))
	for name := range data {
		if strings.HasSuffix(name, KeySuffix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		sc := bufio.NewScanner(bytes.NewReader(data[name]))
		for line := 1; sc.Scan(); line++ {
			s := strings.TrimSpace(sc.Text())
			if s == "" || strings.HasPrefix(s, "#") {
				continue
			}
			id, recipient, err := parseIdentity(s)
			if err != nil {
				return nil, fmt.Errorf("decryption Secret key %q, line %d: %w", name, line, err)
			}
			k.identities = append(k.identities, id)
			if !slices.Contains(k.recipients, recipient) {
				k.recipients = append(k.recipients, recipient)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("decryption Secret key %q: %w", name, err)
		}
	}
	if len(k.identities) == 0 {
		return nil, fmt.Errorf("the decryption Secret has no age identity: put one, as age-keygen writes it, under a data key ending in %q", KeySuffix)
	}
	return k, nil
}

func parseIdentity(s string) (age.Identity, string, error) {
	switch {
	case strings.HasPrefix(s, "AGE-PLUGIN-"):
		return nil, "", errors.New("age plugin identities are not supported (they run a program): use a native age key (age-keygen)")
	case strings.HasPrefix(s, "AGE-SECRET-KEY-PQ-1"):
		id, err := age.ParseHybridIdentity(s)
		if err != nil {
			return nil, "", errors.New("not a valid age post-quantum identity")
		}
		return id, id.Recipient().String(), nil
	case strings.HasPrefix(s, "AGE-SECRET-KEY-1"):
		id, err := age.ParseX25519Identity(s)
		if err != nil {
			return nil, "", errors.New("not a valid age identity")
		}
		return id, id.Recipient().String(), nil
	default:
		return nil, "", errors.New("not an age identity (one per line, as age-keygen writes it)")
	}
}

// Recipients are the public keys (age1…) of the identities, in the order
// found: safe to show.
func (k *Keys) Recipients() []string {
	if k == nil {
		return nil
	}
	return slices.Clone(k.recipients)
}

// String names the recipients only, so that printing Keys by mistake shows
// no key material.
func (k *Keys) String() string {
	return "age identities for " + strings.Join(k.Recipients(), ", ")
}

// GoString is String, for %#v.
func (k *Keys) GoString() string { return k.String() }
