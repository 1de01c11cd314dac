package sops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxDepth bounds the nesting of a JSON file (each level is a call).
const maxDepth = 1000

// loadJSON reads a JSON file, a top-level object, into one Branch, as
// sops' JSON store does: keys in order, integers that fit 64 bits as int,
// other numbers as float64.
func loadJSON(data []byte) ([]Branch, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("a JSON file must be an object (sops supports no other)")
	}
	b, err := jsonObject(dec, 1)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not valid JSON: more after the top-level object")
	}
	return []Branch{b}, nil
}

func jsonObject(dec *json.Decoder, depth int) (Branch, error) {
	b := Branch{}
	seen := map[string]bool{}
	for {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if t == json.Delim('}') {
			return b, nil
		}
		key, ok := t.(string)
		if !ok {
			return nil, errors.New("an object key that is not a string")
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		v, err := jsonValue(dec, depth)
		if err != nil {
			return nil, err
		}
		b = append(b, Item{Key: key, Value: v})
	}
}

func jsonValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			return jsonObject(dec, depth+1)
		case '[':
			l := []any{}
			for dec.More() {
				v, err := jsonValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			if _, err := dec.Token(); err != nil { // ]
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return int(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return nil, fmt.Errorf("a number out of range")
		}
		return f, nil
	}
	return t, nil // string, bool, nil
}

// emitJSON writes one object, keys in order, indented.
func emitJSON(b Branch) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, b); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "\t"); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case Branch:
		buf.WriteByte('{')
		for i, it := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(it.Key)
			buf.Write(k)
			buf.WriteByte(':')
			if err := writeJSON(buf, it.Value); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}
