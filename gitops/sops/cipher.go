package sops

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// A value as sops encrypts it:
//
//	ENC[AES256_GCM,data:<base64>,iv:<base64>,tag:<base64>,type:<type>]
//
// AES-256-GCM with the file's data key, a random 32-byte nonce per value,
// and the value's path as additional data. An empty value stays empty.
const (
	encPrefix = "ENC[AES256_GCM,"
	nonceSize = 32
	tagSize   = 16
)

// IsEncrypted reports whether a scalar is a value sops encrypted.
func IsEncrypted(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, encPrefix)
}

// comment is a decrypted value of type comment: sops encrypts comments
// too; they hold no data and are dropped.
type comment struct{}

// errValue never quotes the value: a value that does not decrypt may be a
// secret written in clear.
var errValue = errors.New("not a value encrypted by sops")

type encValue struct {
	data, iv, tag []byte
	typ           string
}

func parseEnc(s string) (*encValue, error) {
	if !strings.HasPrefix(s, encPrefix) || !strings.HasSuffix(s, "]") {
		return nil, errValue
	}
	fields := strings.Split(strings.TrimSuffix(strings.TrimPrefix(s, encPrefix), "]"), ",")
	if len(fields) != 4 {
		return nil, errValue
	}
	v := &encValue{}
	for i, name := range []string{"data:", "iv:", "tag:", "type:"} {
		f, ok := strings.CutPrefix(fields[i], name)
		if !ok {
			return nil, errValue
		}
		if name == "type:" {
			v.typ = f
			break
		}
		b, err := base64.StdEncoding.DecodeString(f)
		if err != nil {
			return nil, errValue
		}
		switch name {
		case "data:":
			v.data = b
		case "iv:":
			v.iv = b
		case "tag:":
			v.tag = b
		}
	}
	if len(v.iv) == 0 || len(v.tag) != tagSize {
		return nil, errValue
	}
	return v, nil
}

func gcm(key []byte, nonce int) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("the data key: %w", err)
	}
	return cipher.NewGCMWithNonceSize(block, nonce)
}

// decryptValue opens one encrypted value. Its errors name neither the
// value nor the key.
func decryptValue(s string, key []byte, ad string) (any, error) {
	if s == "" {
		return "", nil
	}
	ev, err := parseEnc(s)
	if err != nil {
		return nil, err
	}
	aead, err := gcm(key, len(ev.iv))
	if err != nil {
		return nil, err
	}
	plain, err := aead.Open(nil, ev.iv, append(ev.data[:len(ev.data):len(ev.data)], ev.tag...), []byte(ad))
	if err != nil {
		return nil, errors.New("it does not decrypt with the data key at this path (changed after encryption, or moved from another key)")
	}
	p := string(plain)
	switch ev.typ {
	case "str", "bytes":
		return p, nil
	case "int":
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, errors.New("a value of type int does not hold an integer")
		}
		return n, nil
	case "float":
		f, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, errors.New("a value of type float does not hold a number")
		}
		return f, nil
	case "bool":
		b, err := strconv.ParseBool(p)
		if err != nil {
			return nil, errors.New("a value of type bool does not hold true or false")
		}
		return b, nil
	case "time":
		var t time.Time
		if err := t.UnmarshalText(plain); err != nil {
			return nil, errors.New("a value of type time does not hold a time")
		}
		return t, nil
	case "comment":
		return comment{}, nil
	}
	return nil, fmt.Errorf("unknown value type %q", ev.typ)
}

// encryptValue encrypts one scalar as sops does.
func encryptValue(v any, key []byte, ad string) (string, error) {
	var plain []byte
	var typ string
	switch v := v.(type) {
	case string:
		if v == "" {
			return "", nil
		}
		plain, typ = []byte(v), "str"
	case int:
		plain, typ = []byte(strconv.Itoa(v)), "int"
	case float64:
		plain, typ = []byte(strconv.FormatFloat(v, 'f', -1, 64)), "float"
	case bool:
		plain, typ = []byte("False"), "bool" // sops writes booleans title-cased
		if v {
			plain = []byte("True")
		}
	case time.Time:
		b, err := v.MarshalText()
		if err != nil {
			return "", err
		}
		plain, typ = b, "time"
	default:
		return "", fmt.Errorf("a value of type %T cannot be encrypted", v)
	}
	aead, err := gcm(key, nonceSize)
	if err != nil {
		return "", err
	}
	iv := make([]byte, nonceSize)
	if _, err := rand.Read(iv); err != nil {
		return "", err
	}
	sealed := aead.Seal(nil, iv, plain, []byte(ad))
	data, tag := sealed[:len(sealed)-tagSize], sealed[len(sealed)-tagSize:]
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%sdata:%s,iv:%s,tag:%s,type:%s]", encPrefix, enc(data), enc(iv), enc(tag), typ), nil
}

// macOnlyEncryptedInit starts the MAC of a file with mac_only_encrypted, so
// that it never equals the MAC of the same values without it (sops' value).
var macOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
	0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

// mac is the SHA-512 over the clear bytes of the values it covers, in file
// order; its sum is written in upper-case hex.
type mac struct{ h hash.Hash }

func newMAC(onlyEncrypted bool) *mac {
	m := &mac{h: sha512.New()}
	if onlyEncrypted {
		m.h.Write(macOnlyEncryptedInit)
	}
	return m
}

// add hashes a clear scalar as sops writes it into the MAC.
func (m *mac) add(v any) error {
	switch v := v.(type) {
	case string:
		m.h.Write([]byte(v))
	case int:
		m.h.Write([]byte(strconv.Itoa(v)))
	case float64:
		m.h.Write([]byte(strconv.FormatFloat(v, 'f', -1, 64)))
	case bool:
		if v {
			m.h.Write([]byte("True"))
		} else {
			m.h.Write([]byte("False"))
		}
	case time.Time:
		b, err := v.MarshalText()
		if err != nil {
			return err
		}
		m.h.Write(b)
	case comment:
	default:
		return fmt.Errorf("a value of type %T cannot be authenticated", v)
	}
	return nil
}

func (m *mac) sum() string { return fmt.Sprintf("%X", m.h.Sum(nil)) }
