package sops

import (
	"fmt"
	"strconv"
	"time"
)

// Key sources other than age, by their metadata key, with the field that
// names each key publicly (what sops shows of it).
var otherKeyTypes = []struct{ key, id string }{
	{"kms", "arn"},
	{"gcp_kms", "resource_id"},
	{"azure_kv", "vault_url"},
	{"hc_vault", "vault_address"},
	{"hckms", "key_id"},
	{"pgp", "fp"},
}

func parseMetadata(b Branch) (Metadata, error) {
	m := Metadata{}
	var err error
	str := func(key string) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = scalarString(b.Get(key), key)
		return s
	}
	m.LastModified = str("lastmodified")
	m.MAC = str("mac")
	m.Version = str("version")
	m.UnencryptedSuffix = str("unencrypted_suffix")
	m.EncryptedSuffix = str("encrypted_suffix")
	m.UnencryptedRegex = str("unencrypted_regex")
	m.EncryptedRegex = str("encrypted_regex")
	m.UnencryptedCommentRegex = str("unencrypted_comment_regex")
	m.EncryptedCommentRegex = str("encrypted_comment_regex")
	macOnly := str("mac_only_encrypted")
	threshold := str("shamir_threshold")
	if err != nil {
		return m, err
	}
	if macOnly != "" {
		if m.MACOnlyEncrypted, err = strconv.ParseBool(macOnly); err != nil {
			return m, fmt.Errorf("mac_only_encrypted is not true or false")
		}
	}
	if threshold != "" {
		if m.ShamirThreshold, err = strconv.Atoi(threshold); err != nil {
			return m, fmt.Errorf("shamir_threshold is not a number")
		}
	}
	if m.MAC == "" {
		return m, fmt.Errorf("no mac")
	}
	// Keys at the top level form one group; key_groups, used only when
	// there are none at the top level, form one group each.
	group, others, found, err := keysOf(b, "")
	if err != nil {
		return m, err
	}
	if found {
		m.KeyGroups, m.Others = [][]AgeKey{group}, others
		return m, nil
	}
	groups, _ := b.Get("key_groups").([]any)
	for i, g := range groups {
		gb, ok := g.(Branch)
		if !ok {
			return m, fmt.Errorf("key_groups[%d] is not a mapping", i)
		}
		group, others, _, err := keysOf(gb, fmt.Sprintf("key_groups[%d].", i))
		if err != nil {
			return m, err
		}
		m.KeyGroups = append(m.KeyGroups, group)
		m.Others = append(m.Others, others...)
	}
	return m, nil
}

// keysOf reads the age keys of a group and names its other keys; found says
// whether it holds a key at all.
func keysOf(b Branch, where string) (group []AgeKey, others []string, found bool, err error) {
	ages, err := entries(b, "age", where)
	if err != nil {
		return nil, nil, false, err
	}
	for i, e := range ages {
		var k AgeKey
		if k.Recipient, err = scalarString(e.Get("recipient"), fmt.Sprintf("%sage[%d].recipient", where, i)); err != nil {
			return nil, nil, false, err
		}
		if k.Enc, err = scalarString(e.Get("enc"), fmt.Sprintf("%sage[%d].enc", where, i)); err != nil {
			return nil, nil, false, err
		}
		group = append(group, k)
	}
	for _, t := range otherKeyTypes {
		es, err := entries(b, t.key, where)
		if err != nil {
			return nil, nil, false, err
		}
		for _, e := range es {
			id, _ := scalarString(e.Get(t.id), t.id)
			others = append(others, t.key+" "+id+" (not supported: only age)")
		}
	}
	return group, others, len(group)+len(others) > 0, nil
}

// entries is the list of mappings at key (none: nil).
func entries(b Branch, key, where string) ([]Branch, error) {
	v := b.Get(key)
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s%s is not a list", where, key)
	}
	out := make([]Branch, 0, len(l))
	for i, e := range l {
		eb, ok := e.(Branch)
		if !ok {
			return nil, fmt.Errorf("%s%s[%d] is not a mapping", where, key, i)
		}
		out = append(out, eb)
	}
	return out, nil
}

// scalarString reads a metadata scalar as sops does (weakly typed: a
// number or a boolean is its text, a time its RFC 3339 form).
func scalarString(v any, name string) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case time.Time:
		return v.Format(time.RFC3339), nil
	}
	return "", fmt.Errorf("%s is not a scalar", name)
}

// branch is the metadata as sops writes it (one key group).
func (m *Metadata) branch() Branch {
	var ages []any
	for _, g := range m.KeyGroups {
		for _, k := range g {
			ages = append(ages, Branch{{Key: "recipient", Value: k.Recipient}, {Key: "enc", Value: k.Enc}})
		}
	}
	b := Branch{{Key: "age", Value: ages}, {Key: "lastmodified", Value: m.LastModified}, {Key: "mac", Value: m.MAC}}
	for _, r := range []struct{ k, v string }{
		{"unencrypted_suffix", m.UnencryptedSuffix}, {"encrypted_suffix", m.EncryptedSuffix},
		{"unencrypted_regex", m.UnencryptedRegex}, {"encrypted_regex", m.EncryptedRegex},
	} {
		if r.v != "" {
			b = append(b, Item{Key: r.k, Value: r.v})
		}
	}
	if m.MACOnlyEncrypted {
		b = append(b, Item{Key: "mac_only_encrypted", Value: true})
	}
	return append(b, Item{Key: "version", Value: m.Version})
}
