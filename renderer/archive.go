package renderer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"sort"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// maxChartArchive bounds a chart archive read back from the API (an
// AgentRollout's spec.chart): the agent chart is a few kilobytes.
const maxChartArchive = 1 << 20

// Archive is the chart's files as a gzipped tar, the form `helm package`
// writes. The same files always give the same bytes, and a chart loaded
// from the archive has the same Digest.
func (c *Chart) Archive() ([]byte, error) {
	files := append(c.chart.Raw[:0:0], c.chart.Raw...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	top := c.chart.Name()
	for _, f := range files {
		hdr := &tar.Header{Name: top + "/" + f.Name, Mode: 0o644, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// LoadChartArchive parses a chart from a gzipped tar (Chart.Archive).
func LoadChartArchive(b []byte) (*Chart, error) {
	if len(b) > maxChartArchive {
		return nil, fmt.Errorf("chart archive of %d bytes is over the %d-byte limit", len(b), maxChartArchive)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("loading chart archive: %w", err)
	}
	return newChart(ch), nil
}

// ChartArchive is the agent chart as a gzipped tar, kept with an agent
// revision so an agent can be rendered from it after an upgrade replaced
// the chart.
func (r *AgentRenderer) ChartArchive() ([]byte, error) { return r.chart.Archive() }

// NewAgentRendererArchive parses an agent chart kept by ChartArchive.
func NewAgentRendererArchive(b []byte) (*AgentRenderer, error) {
	ch, err := LoadChartArchive(b)
	if err != nil {
		return nil, err
	}
	return &AgentRenderer{chart: ch}, nil
}
