// Package renderer is the project's one renderer: a Helm chart with values,
// optionally followed by a kustomize overlay, becomes objects in a stable
// order and the multi-document YAML that `helm template` prints. It never
// talks to a cluster, and the same input always gives the same bytes.
//
// The agent chart is rendered here too (AgentRenderer), from the values of
// renderer/agentvalues: the controller, the CLI and the tests all build
// charts/fleet-agent values through that package.
package renderer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Chart is a parsed Helm chart. Parse once, render many times.
type Chart struct {
	chart *chart.Chart
	// mu serialises renders: Helm's install action rewrites the chart's
	// dependency list while it renders.
	mu sync.Mutex
	// schema is the chart's values.schema.json compiled once, for charts
	// without subcharts. Helm would compile it on every render, which is
	// most of the cost of rendering a small chart.
	schema *jsonschema.Schema
	// digest identifies the chart's files; see Digest.
	digest string
}

func newChart(ch *chart.Chart) *Chart {
	c := &Chart{chart: ch, digest: digestFiles(ch.Raw)}
	if ch.Schema == nil || len(ch.Dependencies()) > 0 {
		return c
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ch.Schema))
	if err != nil {
		return c // Helm reports it at render time
	}
	compiler := jsonschema.NewCompiler()
	if err := compiler.AddResource("file:///values.schema.json", doc); err != nil {
		return c
	}
	if sch, err := compiler.Compile("file:///values.schema.json"); err == nil {
		c.schema = sch
	}
	return c
}

// validate checks coalesced values against the precompiled schema, with the
// message Helm would give.
func (c *Chart) validate(vals map[string]any) error {
	if err := c.schema.Validate(vals); err != nil {
		msg := strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n")
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s", c.chart.Name(), msg)
	}
	return nil
}

// Name returns the chart's name.
func (c *Chart) Name() string { return c.chart.Name() }

// Digest is the sha256 of every file of the chart as loaded (names and
// contents, subcharts included), computed once at load. Two charts with the
// same digest render the same output for the same values (and Helm).
func (c *Chart) Digest() string { return c.digest }

// digestFiles hashes files in name order, each as its length-prefixed name
// and contents, so no two different file sets hash alike.
func digestFiles(files []*common.File) string {
	sorted := make([]*common.File, len(files))
	copy(sorted, files)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := sha256.New()
	for _, f := range sorted {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LoadChartDir parses the chart in a directory.
func LoadChartDir(dir string) (*Chart, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return newChart(ch), nil
}

// LoadChartFS parses the chart at root within fsys (an embedded chart, or a
// Bundle's files).
func LoadChartFS(fsys fs.FS, root string) (*Chart, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[p] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading chart %s: %w", root, err)
	}
	return loadChartFiles(files, root)
}

// loadChartFiles parses the chart at root among files (paths relative to
// the same base, as a Bundle's resources are); files outside root are not
// read.
func loadChartFiles(files map[string][]byte, root string) (*Chart, error) {
	root = path.Clean(root)
	var buffered []*archive.BufferedFile
	for p, data := range files {
		rel := path.Clean(p)
		if root != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(rel, root+"/"); !ok {
				continue
			}
		}
		buffered = append(buffered, &archive.BufferedFile{Name: rel, Data: data})
	}
	// The loader keeps files in the order given: in a directory walk's
	// order (by name within each directory), the chart's digest and archive
	// do not depend on map order and stay what they were when charts were
	// read with fs.WalkDir.
	sort.Slice(buffered, func(i, j int) bool {
		return slices.Compare(strings.Split(buffered[i].Name, "/"), strings.Split(buffered[j].Name, "/")) < 0
	})
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", root, err)
	}
	return newChart(ch), nil
}
