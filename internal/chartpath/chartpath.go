// Package chartpath says where a chart fetched from a repository, an OCI
// registry or a URL sits among a Bundle's resources, as Fleet's `fleet
// apply` lays it out: under `.chart/<sha256 of "chart:repo:version">/`,
// usually in a directory named after the chart. The source component
// (gitops/charts) writes it there and the renderer reads it from there, so
// Bundles made by Fleet's `fleet apply` render here unchanged. It links
// neither Helm nor the network.
package chartpath

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Remote reports whether Helm options name a chart outside the Bundle's
// own files: a repository (`helm.repo`), or a chart given as a URL
// (`oci://…`, `https://…`).
func Remote(h *fleet.HelmOptions) bool {
	if h == nil {
		return false
	}
	return h.Repo != "" || strings.Contains(h.Chart, "://")
}

// Dir is the directory of the Bundle's resources that holds the chart the
// options name, fetched: `.chart/` and the hex sha256 of
// "<chart>:<repo>:<version>" (Fleet's checksum of the options as written).
func Dir(h *fleet.HelmOptions) string {
	sum := sha256.Sum256([]byte(h.Chart + ":" + h.Repo + ":" + h.Version))
	return ".chart/" + hex.EncodeToString(sum[:])
}

// Describe names the chart the options refer to, for messages:
// `chart "app" version "^1.0" from repo "https://charts.example"`, with
// user information written into a URL shown as "xxxxx".
func Describe(h *fleet.HelmOptions) string {
	var b strings.Builder
	b.WriteString("chart")
	if h.Chart != "" {
		b.WriteString(" " + quote(Redact(h.Chart)))
	}
	if h.Version != "" {
		b.WriteString(" version " + quote(h.Version))
	}
	if h.Repo != "" {
		b.WriteString(" from repo " + quote(Redact(h.Repo)))
	}
	return b.String()
}

// Redact returns s with a URL's user information (a user name can be a
// token) replaced by "xxxxx"; s unchanged when it is no URL or has none.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User("xxxxx")
	return u.String()
}

func quote(s string) string { return `"` + s + `"` }
