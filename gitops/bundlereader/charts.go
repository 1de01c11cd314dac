package bundlereader

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// ChartRef is a chart a fleet.yaml names outside its directory: helm.repo
// (an https:// or oci:// repository, with chart the chart's name), or a URL
// in helm.chart (oci://, https://…tgz).
type ChartRef struct {
	// Path is the Bundle directory (relative to the checkout) that names
	// it: credentials may be chosen by path, as Fleet's
	// helmSecretNameForPaths.
	Path string
	// Field is where in its fleet.yaml ("helm", "targetCustomizations[1].helm").
	Field string
	// Chart, Repo and Version are the helm options as written.
	Chart, Repo, Version string
}

// Chart is a fetched chart.
type Chart struct {
	// Files are the chart's files by path (slash-separated, relative), as
	// the fetcher lays them out.
	Files map[string][]byte
	// Digest identifies the content (for example the archive's sha256).
	Digest string
}

// ChartFetcher fetches the charts fleet.yaml files name. The source
// component gives one (gitops/charts); its errors should name the URL but
// never a credential.
type ChartFetcher interface {
	FetchChart(ctx context.Context, ref ChartRef) (*Chart, error)
}

// isURL says a helm.chart names a chart to fetch rather than a path.
func isURL(chart string) bool { return strings.Contains(chart, "://") }

// addCharts checks the charts the helm blocks name: a local chart must be
// inside the directory (its files are already read); a chart from a
// repository or URL is fetched and embedded under chartPrefix, once per
// (chart, repo, version). It returns the fetched charts' digests.
func (r *reader) addCharts(ctx context.Context, dir, fieldFile string, helms []helmRef, files map[string][]byte, total int64) ([]string, error) {
	var digests []string
	done := map[string]bool{}
	for _, h := range helms {
		if h.helm.Chart == "" && h.helm.Repo == "" {
			continue
		}
		if h.helm.Repo == "" && !isURL(h.helm.Chart) {
			clean := path.Clean(filepath.ToSlash(h.helm.Chart))
			if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
				return nil, &FieldError{File: fieldFile, Field: h.field + ".chart", Err: fmt.Errorf("%q must be a chart inside %s (or a URL, or a chart name with helm.repo)", h.helm.Chart, dir)}
			}
			if _, err := os.Stat(r.abs(path.Join(dir, clean))); err != nil {
				return nil, &FieldError{File: fieldFile, Field: h.field + ".chart", Err: fmt.Errorf("%q is not in %s; a chart from a repository needs helm.repo, or an oci:// or https:// URL in helm.chart", h.helm.Chart, dir)}
			}
			continue
		}
		field := h.field + ".repo"
		if h.helm.Repo == "" {
			field = h.field + ".chart"
		}
		prefix := chartPrefix(h.helm)
		if done[prefix] {
			continue
		}
		done[prefix] = true
		if r.opts.Charts == nil {
			return nil, &FieldError{File: fieldFile, Field: field, Err: fmt.Errorf("the chart %s is fetched by the GitOps source component or fleet apply, and this reader was given no chart fetcher: put the chart in the directory and name it in helm.chart", describe(h.helm))}
		}
		ch, err := r.opts.Charts.FetchChart(ctx, ChartRef{Path: dir, Field: h.field, Chart: h.helm.Chart, Repo: h.helm.Repo, Version: h.helm.Version})
		if err != nil {
			return nil, &FieldError{File: fieldFile, Field: field, Err: fmt.Errorf("fetching the chart %s: %w", describe(h.helm), err)}
		}
		for name, data := range ch.Files {
			clean := path.Clean(name)
			if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
				return nil, &FieldError{File: fieldFile, Field: field, Err: fmt.Errorf("the chart %s has a file outside itself: %q", describe(h.helm), name)}
			}
			if len(files) >= r.limits.Files {
				return nil, fmt.Errorf("more than %d files with the chart %s", r.limits.Files, describe(h.helm))
			}
			if total += int64(len(data)); total > r.limits.PathBytes {
				return nil, fmt.Errorf("its files and the chart %s are larger than %s together", describe(h.helm), formatBytes(r.limits.PathBytes))
			}
			files[path.Join(prefix, clean)] = data
		}
		digests = append(digests, ch.Digest)
	}
	return digests, nil
}

func describe(h *fleet.HelmOptions) string {
	s := fmt.Sprintf("%q", h.Chart)
	if h.Repo != "" {
		s += fmt.Sprintf(" from %q", h.Repo)
	}
	if h.Version != "" {
		s += fmt.Sprintf(" version %q", h.Version)
	}
	return s
}
