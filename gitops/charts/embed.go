package charts

import (
	"bytes"
	"compress/gzip"
	"context"
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

// Wanted lists the remote charts a Bundle's renderer may look for, once
// each: the Bundle's own helm options when they name one
// (chartpath.Remote), and for each target that sets chart, repo or
// version, the Bundle's options with the target's laid over (as the
// renderer merges them), when they name one. Fleet's `fleet apply` embeds
// a target's options as written; the merge gives the same directory when
// a target sets all three, and the one the renderer uses when it sets only
// some (a target pinning another version of the Bundle's chart).
func Wanted(spec *fleet.BundleSpec) []fleet.HelmOptions {
	var out []fleet.HelmOptions
	seen := map[string]bool{}
	add := func(h fleet.HelmOptions) {
		if !chartpath.Remote(&h) {
			return
		}
		ref := fleet.HelmOptions{Chart: h.Chart, Repo: h.Repo, Version: h.Version}
		if dir := chartpath.Dir(&ref); !seen[dir] {
			seen[dir] = true
			out = append(out, ref)
		}
	}
	var base fleet.HelmOptions
	if spec.Helm != nil {
		base = *spec.Helm
		add(base)
	}
	for _, t := range spec.Targets {
		th := t.Helm
		if th == nil || (th.Chart == "" && th.Repo == "" && th.Version == "") {
			continue
		}
		merged := fleet.HelmOptions{Chart: base.Chart, Repo: base.Repo, Version: base.Version}
		if th.Chart != "" {
			merged.Chart = th.Chart
		}
		if th.Repo != "" {
			merged.Repo = th.Repo
		}
		if th.Version != "" {
			merged.Version = th.Version
		}
		add(merged)
	}
	return out
}

// Embed fetches every chart the Bundle's options name (Wanted) and returns
// their resources, to append to the Bundle's own, and the charts in the
// same order. The first failure stops it, naming the chart.
func (f *Fetcher) Embed(ctx context.Context, spec *fleet.BundleSpec, auth Auth, urlRegex string, compress bool) ([]fleet.BundleResource, []*Chart, error) {
	var res []fleet.BundleResource
	var fetched []*Chart
	for _, h := range Wanted(spec) {
		ch, err := f.Fetch(ctx, Request{Helm: h, Auth: auth, URLRegex: urlRegex})
		if err != nil {
			return nil, nil, err
		}
		r, err := Resources(h, ch, compress)
		if err != nil {
			return nil, nil, err
		}
		res = append(res, r...)
		fetched = append(fetched, ch)
	}
	return res, fetched, nil
}
