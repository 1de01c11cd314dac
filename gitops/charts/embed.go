package charts

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"sort"
	"unicode/utf8"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// Resources are the chart's files as Bundle resources, where the renderer
// looks for the chart the Helm options name (chartpath.Dir, Fleet's
// `.chart/<sha256>/` layout): `.chart/<sha256>/<chart>/Chart.yaml`, …,
// sorted by name. Text files are stored as they are (Fleet's default),
// others, or every file with compress, as base64+gz. h must be the options
// as the Bundle keeps them (chart, repo and version as written), which
// also stay in the Bundle.
func Resources(h fleet.HelmOptions, ch *Chart, compress bool) ([]fleet.BundleResource, error) {
	dir := chartpath.Dir(&h)
	out := make([]fleet.BundleResource, 0, len(ch.Files))
	for name, data := range ch.Files {
		r := fleet.BundleResource{Name: dir + "/" + name}
		if compress || !utf8.Valid(data) {
			content, err := base64GZ(data)
			if err != nil {
				return nil, err
			}
			r.Content, r.Encoding = content, "base64+gz"
		} else {
			r.Content = string(data)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func base64GZ(data []byte) (string, error) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b.Bytes()), nil
}
