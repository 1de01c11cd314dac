// Package charts fetches the Helm charts a fleet.yaml names outside its
// own directory (helm.repo + helm.chart + helm.version, `oci://…` in
// helm.chart or helm.repo, an https URL of a .tgz), for the source
// component to embed in the Bundle: the renderer renders the embedded copy
// and never fetches (SPEC §6). One resolver for every form (Fleet users'
// complaint: `chart` and `repo` meant different things in different
// places), Helm's credentials sent only where the GitRepo's
// helmRepoURLRegex allows, bounded in size, files, time and memory, and a
// cache by digest so many Bundles naming one chart fetch it once.
package charts

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/Masterminds/semver/v3"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/chartpath"
)

// Kind is where a chart comes from.
type Kind string

const (
	// Repository: an index.yaml at helm.repo lists helm.chart's versions.
	Repository Kind = "repository"
	// OCI: an OCI registry; the reference is the chart's repository, the
	// version its tag.
	OCI Kind = "oci"
	// URL: helm.chart is the address of the chart's archive.
	URL Kind = "url"
)

// Ref is a resolved reading of Helm options: what to fetch and from where.
type Ref struct {
	Kind Kind
	// Location: the repository's URL (Repository), the registry reference
	// without scheme and tag (OCI: registry.example/charts/app), the
	// archive's URL (URL).
	Location string
	// Name is the chart's name in the repository (Repository only).
	Name string
	// Version is the version or semver range asked for; empty: the latest
	// stable version (Repository, OCI), or the tag written in the OCI
	// reference.
	Version string
	// written is what credentials are matched against (Fleet's rule:
	// helm.repo, else helm.chart).
	written string
}

// ParseRef reads Helm options as Fleet's `fleet apply` does:
//   - helm.repo `oci://registry/path/name`: that chart (helm.chart empty,
//     or naming the reference's last element; any other name is appended
//     as a path element: Fleet ignores it);
//   - helm.repo `https://…` (or `http://…`): chart helm.chart in that
//     repository's index.yaml, version helm.version (a version, a semver
//     range, or empty for the latest stable one);
//   - helm.chart `oci://…` without helm.repo: that chart;
//   - helm.chart `https://….tgz` without helm.repo: that archive
//     (helm.version is not used).
//
// Errors name the field and what to write instead.
func ParseRef(h fleet.HelmOptions) (Ref, error) {
	ref, err := parseRef(h)
	if err != nil || ref.Kind == URL || ref.Version == "" {
		return ref, err
	}
	if _, err := semver.NewConstraint(ref.Version); err != nil {
		return Ref{}, fmt.Errorf("helm.version %q is neither a version nor a semver range: %v", ref.Version, err)
	}
	return ref, nil
}

func parseRef(h fleet.HelmOptions) (Ref, error) {
	if h.Repo != "" {
		u, err := url.Parse(h.Repo)
		if err != nil {
			return Ref{}, fmt.Errorf("helm.repo %q is not a URL: %v", chartpath.Redact(h.Repo), err)
		}
		switch u.Scheme {
		case "oci":
			loc := strings.TrimSuffix(strings.TrimPrefix(h.Repo, "oci://"), "/")
			if h.Chart != "" && !strings.Contains(h.Chart, "://") && h.Chart != path.Base(ociRepository(loc)) {
				loc += "/" + strings.Trim(h.Chart, "/")
			}
			return ociRef(loc, h.Version, h.Repo)
		case "https", "http":
			if h.Chart == "" {
				return Ref{}, fmt.Errorf("helm.repo %q names a chart repository: helm.chart must name the chart in it", chartpath.Redact(h.Repo))
			}
			if strings.Contains(h.Chart, "/") {
				return Ref{}, fmt.Errorf("helm.chart %q with helm.repo %q must be the chart's name in the repository, not a path or URL", chartpath.Redact(h.Chart), chartpath.Redact(h.Repo))
			}
			return Ref{Kind: Repository, Location: h.Repo, Name: h.Chart, Version: h.Version, written: h.Repo}, nil
		}
		return Ref{}, fmt.Errorf("helm.repo %q: want an https://, http:// or oci:// URL", chartpath.Redact(h.Repo))
	}
	u, err := url.Parse(h.Chart)
	if err != nil || !strings.Contains(h.Chart, "://") {
		return Ref{}, fmt.Errorf("helm.chart %q is a directory of the Bundle, not a chart to fetch", chartpath.Redact(h.Chart))
	}
	switch u.Scheme {
	case "oci":
		return ociRef(strings.TrimPrefix(h.Chart, "oci://"), h.Version, h.Chart)
	case "https", "http":
		return Ref{Kind: URL, Location: h.Chart, written: h.Chart}, nil
	}
	return Ref{}, fmt.Errorf("helm.chart %q: charts are fetched from https://, http:// and oci:// URLs only", chartpath.Redact(h.Chart))
}

// ociRef splits a tag written in the reference from it: the version is
// helm.version, else that tag; both and different is an error.
func ociRef(loc, version, written string) (Ref, error) {
	if strings.Contains(loc, "@") {
		return Ref{}, fmt.Errorf("%q: OCI references by digest are not supported; name a tag or a version", chartpath.Redact(written))
	}
	repo, tag := loc, ""
	if i := strings.LastIndex(loc, ":"); i > strings.LastIndex(loc, "/") {
		repo, tag = loc[:i], loc[i+1:]
	}
	if !strings.Contains(repo, "/") {
		return Ref{}, fmt.Errorf("%q: an OCI chart reference is oci://<registry>/<path>/<chart>", chartpath.Redact(written))
	}
	switch {
	case version == "":
		version = tag
	case tag != "" && tag != version:
		return Ref{}, fmt.Errorf("%q has tag %q but helm.version is %q: write the version once", chartpath.Redact(written), tag, version)
	}
	return Ref{Kind: OCI, Location: repo, Version: version, written: written}, nil
}

// ociRepository is an OCI reference without its tag.
func ociRepository(loc string) string {
	if i := strings.LastIndex(loc, ":"); i > strings.LastIndex(loc, "/") {
		return loc[:i]
	}
	return loc
}

// String names the chart for messages, without credentials.
func (r Ref) String() string {
	v := r.Version
	if v == "" {
		v = "latest"
	}
	switch r.Kind {
	case Repository:
		return fmt.Sprintf("chart %q version %q from repository %s", r.Name, v, chartpath.Redact(r.Location))
	case OCI:
		return fmt.Sprintf("chart oci://%s version %q", r.Location, v)
	}
	return "chart " + chartpath.Redact(r.Location)
}

// host is the scheme and host of the place the reference's requests go
// first: https://host[:port].
func (r Ref) host() (*url.URL, error) {
	switch r.Kind {
	case OCI:
		host, _, _ := strings.Cut(r.Location, "/")
		return &url.URL{Scheme: "https", Host: host}, nil
	}
	u, err := url.Parse(r.Location)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}
