// Package chartstest builds Helm chart archives for tests with the Helm SDK
// (chartutil.Save, what `helm package` writes), for the chart fetcher's
// tests, `fleet apply`'s and the e2e suite's chart repositories.
package chartstest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"
)

// Archive packages chart name at version: one template
// (templates/cm.yaml), values.yaml, and the extra files given (name →
// content, relative to the chart).
func Archive(t testing.TB, name, version, template, values string, extra map[string][]byte) []byte {
	t.Helper()
	at := time.Unix(1, 0)
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatalf("values of chart %s: %v", name, err)
	}
	ch := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version},
		Templates: []*common.File{{Name: "templates/cm.yaml", Data: []byte(template), ModTime: at}},
		Raw:       []*common.File{{Name: "values.yaml", Data: []byte(values), ModTime: at}},
		Values:    vals,
		ModTime:   at,
	}
	for n, d := range extra {
		ch.Files = append(ch.Files, &common.File{Name: n, Data: d, ModTime: at})
	}
	p, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Clean(p))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
