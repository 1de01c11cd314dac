package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/charts"
	"github.com/gitops-fleet/fleet/gitops/decrypt"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// PathsSecretKey is the key of a helmSecretNameForPaths Secret (Fleet's):
// YAML mapping each Bundle path to its credentials, with the keys of a
// helmSecretName Secret (username, password, caBundle, insecureSkipVerify,
// basicHTTP).
const PathsSecretKey = "secrets.yaml"

// helmAuth is the chart credentials of one GitRepo for one pass.
type helmAuth struct {
	auth     charts.Auth
	urlRegex string
	// byPath, when helmSecretNameForPaths is set, replaces auth for the
	// paths it names (Fleet: the per-path Secret wins).
	byPath map[string]charts.Auth
}

// inputSecrets reads the Secrets the Bundles depend on besides git: the
// decryption key Secret and the Helm credentials. Their versions go into
// versions (a changed Secret makes the next poll read the commit again).
func (p *pass) inputSecrets(ctx context.Context, versions *[]string) (*decrypt.Keys, *helmAuth, error) {
	repo := p.repo
	allowInsecure := p.r.config().AllowGitInsecureSkipTLSVerify
	var keys *decrypt.Keys
	if d := repo.Spec.Decryption; d != nil {
		s, err := p.secret(ctx, "spec.decryption.secretRef", d.SecretRef.Name)
		if err != nil {
			return nil, nil, err
		}
		keys, err = decrypt.KeysFromSecretData(s.Data)
		if err != nil {
			return nil, nil, reconciler.Stall(SecretInvalidReason, "spec.decryption.secretRef %q: %v", d.SecretRef.Name, err)
		}
		*versions = append(*versions, "decryption="+s.ResourceVersion)
	}
	helm := &helmAuth{urlRegex: repo.Spec.HelmRepoURLRegex}
	if name := repo.Spec.HelmSecretName; name != "" {
		s, err := p.secret(ctx, "helmSecretName", name)
		if err != nil {
			return nil, nil, err
		}
		helm.auth, err = charts.AuthFromSecretData(s.Data, allowInsecure)
		if err != nil {
			return nil, nil, reconciler.Stall(SecretInvalidReason, "helmSecretName %q: %v", name, err)
		}
		*versions = append(*versions, "helm="+s.ResourceVersion)
	}
	if name := repo.Spec.HelmSecretNameForPaths; name != "" {
		s, err := p.secret(ctx, "helmSecretNameForPaths", name)
		if err != nil {
			return nil, nil, err
		}
		helm.byPath, err = authByPath(s.Data[PathsSecretKey], allowInsecure)
		if err != nil {
			return nil, nil, reconciler.Stall(SecretInvalidReason, "helmSecretNameForPaths %q: %v", name, err)
		}
		*versions = append(*versions, "helmpaths="+s.ResourceVersion)
	}
	return keys, helm, nil
}

// authByPath reads Fleet's per-path Helm credentials.
func authByPath(data []byte, allowInsecure bool) (map[string]charts.Auth, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("no key %s (a YAML mapping of Bundle paths to credentials)", PathsSecretKey)
	}
	var raw map[string]map[string]any
	if err := yaml.UnmarshalStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("key %s is not a mapping of Bundle paths to credentials (username, password, caBundle, insecureSkipVerify, basicHTTP)", PathsSecretKey)
	}
	out := map[string]charts.Auth{}
	paths := make([]string, 0, len(raw))
	for p := range raw {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fields := map[string][]byte{}
		for k, v := range raw[p] {
			s := fmt.Sprint(v)
			if k == "caBundle" && !strings.Contains(s, "-----BEGIN") {
				// Fleet's struct holds bytes: base64 in YAML.
				if dec, err := base64.StdEncoding.DecodeString(s); err == nil {
					s = string(dec)
				}
			}
			fields[k] = []byte(s)
		}
		a, err := charts.AuthFromSecretData(fields, allowInsecure)
		if err != nil {
			return nil, fmt.Errorf("path %s: %v", p, err)
		}
		out[path.Clean(p)] = a
	}
	return out, nil
}

// chartFetcher adapts gitops/charts to the bundle reader with the GitRepo's
// credentials, as `fleet apply` does with its flags.
type chartFetcher struct {
	f    *charts.Fetcher
	auth *helmAuth
}

func (c *chartFetcher) FetchChart(ctx context.Context, ref bundlereader.ChartRef) (*bundlereader.Chart, error) {
	auth := c.auth.auth
	if a, ok := c.auth.byPath[path.Clean(ref.Path)]; ok {
		auth = a
	}
	ch, err := c.f.Fetch(ctx, charts.Request{
		Helm: fleet.HelmOptions{Chart: ref.Chart, Repo: ref.Repo, Version: ref.Version},
		Auth: auth, URLRegex: c.auth.urlRegex,
	})
	if err != nil {
		return nil, err
	}
	return &bundlereader.Chart{Files: ch.Files, Digest: ch.Digest}, nil
}
