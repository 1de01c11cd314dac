package renderer

import (
	"fmt"
	"path"
	"sort"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// ChartNotEmbeddedError is a Bundle whose helm options name a chart in a
// repository, an OCI registry or at a URL that the Bundle does not hold.
// The renderer never fetches it (SPEC §6: a Bundle author must not make
// the controller fetch URLs): the GitRepo source or `fleet apply` fetches
// it and embeds it under chartpath.Dir.
type ChartNotEmbeddedError struct {
	// Chart describes the chart (chartpath.Describe), Dir where it was
	// looked for.
	Chart, Dir string
}

func (e *ChartNotEmbeddedError) Error() string {
	return fmt.Sprintf("helm: %s is not in the Bundle (no Chart.yaml under %s/): charts from repositories, OCI registries and URLs are fetched by the GitRepo source or `fleet apply` and embedded in the Bundle, never by the controller; make the Bundle with one of them, or put the chart in resources and name its directory in helm.chart",
		e.Chart, e.Dir)
}

// Reason is the Bundle condition reason this error reports as.
func (e *ChartNotEmbeddedError) Reason() string { return fleet.RemoteResourceRefusedReason }

// chartDirOf returns the directory of the chart Helm options name among the
// Bundle's files: helm.chart for a chart of the Bundle's own; for a remote
// chart (chartpath.Remote) the directory Fleet's `fleet apply` embeds it in,
// chartpath.Dir itself or its one subdirectory holding a Chart.yaml.
func chartDirOf(files map[string][]byte, h *fleet.HelmOptions) (string, error) {
	if !chartpath.Remote(h) {
		dir := path.Clean(h.Chart)
		if _, ok := files[path.Join(dir, "Chart.yaml")]; !ok {
			return "", fmt.Errorf("helm.chart %q: the Bundle has no %s", h.Chart, path.Join(dir, "Chart.yaml"))
		}
		return dir, nil
	}
	dir := chartpath.Dir(h)
	if _, ok := files[dir+"/Chart.yaml"]; ok {
		return dir, nil
	}
	var found []string
	for p := range files {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		if sub, file, ok := strings.Cut(rest, "/"); ok && file == "Chart.yaml" {
			found = append(found, dir+"/"+sub)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", &ChartNotEmbeddedError{Chart: chartpath.Describe(h), Dir: dir}
	}
	sort.Strings(found)
	return "", fmt.Errorf("helm: %s: the Bundle holds %d charts under %s/ (%s), want one", chartpath.Describe(h), len(found), dir, strings.Join(found, ", "))
}
