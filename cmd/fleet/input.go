package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// document is one YAML document of an input file.
type document struct {
	index int // from 1
	data  []byte
	meta  typeMeta
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// isFleet reports whether the document is a fleet.cattle.io object of kind.
func (d document) isFleet(kind string) bool {
	return d.meta.Kind == kind && strings.HasPrefix(d.meta.APIVersion, fleet.GroupVersion.Group+"/")
}

// describe names the document's object as a user reads it: "a Secret",
// "a Cluster of cluster.x-k8s.io/v1beta1", "no Kubernetes object".
func (d document) describe(wantKind string) string {
	switch {
	case d.meta.Kind == "":
		return "no Kubernetes object (no kind)"
	case d.meta.Kind == wantKind && !strings.HasPrefix(d.meta.APIVersion, fleet.GroupVersion.Group+"/"):
		return fmt.Sprintf("a %s of %s", d.meta.Kind, d.meta.APIVersion)
	}
	return "a " + d.meta.Kind
}

// name is "Kind namespace/name" (or "Kind name").
func (d document) name() string {
	n := d.meta.Metadata.Name
	if d.meta.Metadata.Namespace != "" {
		n = d.meta.Metadata.Namespace + "/" + n
	}
	return d.meta.Kind + " " + n
}

// readDocuments returns the non-empty YAML documents of a file.
func readDocuments(path string) ([]document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // names the file
	}
	var docs []document
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: not valid YAML: %w", path, i, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue // comments only
		}
		d := document{index: i, data: raw}
		_ = yaml.Unmarshal(raw, &d.meta) // a document without these fields describes itself as such
		docs = append(docs, d)
	}
}

// readObject reads the one fleet.cattle.io object of kind from the file at
// path into obj, wherever it is among the file's documents (a Cluster and
// its kubeconfig Secret, in either order). Another kind, none or several
// are errors that say what the file holds.
func readObject(path, kind string, obj any) error {
	docs, err := readDocuments(path)
	if err != nil {
		return err
	}
	var found []document
	for _, d := range docs {
		if d.isFleet(kind) {
			found = append(found, d)
		}
	}
	switch {
	case len(docs) == 0:
		return fmt.Errorf("%s holds no YAML document: want a %s", path, kind)
	case len(found) == 0 && len(docs) == 1:
		return fmt.Errorf("%s: document %d is %s, not a %s of %s", path, docs[0].index, docs[0].describe(kind), kind, fleet.GroupVersion)
	case len(found) == 0:
		var holds []string
		for _, d := range docs {
			holds = append(holds, fmt.Sprintf("document %d is %s", d.index, d.describe(kind)))
		}
		return fmt.Errorf("%s holds no %s of %s: %s", path, kind, fleet.GroupVersion, strings.Join(holds, ", "))
	case len(found) > 1:
		var at []string
		for _, d := range found {
			at = append(at, fmt.Sprint(d.index))
		}
		return fmt.Errorf("%s holds %d %ss (documents %s): give a file with one", path, len(found), kind, strings.Join(at, ", "))
	}
	d := found[0]
	if err := strictyaml.Unmarshal(d.data, obj); err != nil {
		return fmt.Errorf("%s, document %d (%s): %w", path, d.index, d.name(), err)
	}
	return nil
}
