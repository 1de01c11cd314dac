package sops

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// maxValues bounds the values one file expands to: an alias is expanded
// where it is used, and aliases of aliases grow exponentially.
const maxValues = 1 << 20

// loadYAML reads every document of a YAML file into a Branch, as sops'
// YAML store does (the same YAML library, so scalars get the same types):
// a document is a mapping, or empty; aliases are expanded; comments are
// not read.
func loadYAML(data []byte) ([]Branch, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	budget := maxValues
	var docs []Branch
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not valid YAML: %w", err)
		}
		b, err := documentBranch(&n, &budget)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		docs = append(docs, b)
	}
}

func documentBranch(n *yaml.Node, budget *int) (Branch, error) {
	if n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return Branch{}, nil
	}
	root := n.Content[0]
	for root.Kind == yaml.AliasNode && root.Alias != nil {
		root = root.Alias
	}
	switch {
	case root.Kind == yaml.MappingNode:
		v, err := nodeValue(root, budget)
		if err != nil {
			return nil, err
		}
		return v.(Branch), nil
	case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
		return Branch{}, nil
	}
	return nil, errors.New("a document must be a mapping (sops supports no other)")
}

func nodeValue(n *yaml.Node, budget *int) (any, error) {
	if *budget--; *budget < 0 {
		return nil, errors.New("too many values once aliases are expanded")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, errors.New("an alias to nothing")
		}
		return nodeValue(n.Alias, budget)
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c, budget)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.MappingNode:
		b := make(Branch, 0, len(n.Content)/2)
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			var k any
			if err := kn.Decode(&k); err != nil {
				return nil, fmt.Errorf("line %d: %w", kn.Line, err)
			}
			key, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("line %d: a key that is not a string (sops supports only string keys)", kn.Line)
			}
			if seen[key] {
				return nil, fmt.Errorf("line %d: key %q appears twice", kn.Line, key)
			}
			seen[key] = true
			v, err := nodeValue(vn, budget)
			if err != nil {
				return nil, err
			}
			b = append(b, Item{Key: key, Value: v})
		}
		return b, nil
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// emitYAML writes documents (separated by ---).
func emitYAML(docs []Branch) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	for _, d := range docs {
		n, err := valueNode(d)
		if err != nil {
			return nil, err
		}
		if err := enc.Encode(n); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func valueNode(v any) (*yaml.Node, error) {
	switch v := v.(type) {
	case Branch:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, it := range v {
			k, err := valueNode(it.Key)
			if err != nil {
				return nil, err
			}
			c, err := valueNode(it.Value)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, k, c)
		}
		return n, nil
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range v {
			c, err := valueNode(e)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return n, nil
}
