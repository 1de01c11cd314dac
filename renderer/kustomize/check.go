// Package kustomize builds a Bundle's kustomize overlays offline: every
// kustomization and builtin plugin configuration is checked first, and one
// that names anything kustomize would fetch (a URL, a git repository, a
// Helm chart) is refused (CheckOverlayFiles); the build runs on an
// in-memory copy of the Bundle's files, plugins off.
package kustomize

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// RemoteResourceError is a kustomize overlay that names something outside
// the Bundle: kustomize would fetch it over HTTP, or run git or helm.
type RemoteResourceError struct {
	// File is the file that names it, Field where, Value what.
	File, Field, Value string
	// Problem says what is wrong with it; empty: a remote resource.
	Problem string
}

func (e *RemoteResourceError) Error() string {
	problem := e.Problem
	if problem == "" {
		problem = "is a remote resource; Bundles may only use their own files"
	}
	return fmt.Sprintf("kustomize overlay: %s %s %q %s", e.File, e.Field, e.Value, problem)
}

// Reason is the Bundle condition reason this error reports as.
func (e *RemoteResourceError) Reason() string { return fleet.RemoteResourceRefusedReason }

// kustomizationFileNames are the names kustomize loads a kustomization from
// (konfig.RecognizedKustomizationFileNames).
var kustomizationFileNames = map[string]bool{"kustomization.yaml": true, "kustomization.yml": true, "Kustomization": true}

// CheckOverlayFiles refuses an overlay that names anything kustomize would
// fetch. Kustomize can only load a kustomization from a file of the
// overlay, so every kustomization file in it is checked, whether the root
// reaches it or not; so is every builtin plugin configuration, in a file or
// inline. Files that do not parse are left to kustomize, which parses them
// the same way and fails.
func CheckOverlayFiles(files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if kustomizationFileNames[path.Base(name)] {
			k := &kustypes.Kustomization{}
			// kustomize's own decoding: case-insensitive field names, as
			// kustomize reads them.
			if err := k.Unmarshal(files[name]); err != nil {
				continue
			}
			if err := checkKustomization(name, k); err != nil {
				return err
			}
			continue
		}
		if err := checkPluginConfigs(name, "", files[name]); err != nil {
			return err
		}
	}
	return nil
}

// checkKustomization checks every field of a kustomization that names a
// file, a directory or a repository.
func checkKustomization(file string, k *kustypes.Kustomization) error {
	check := func(field, value string) error {
		if isRemote(value) {
			return &RemoteResourceError{File: file, Field: field, Value: value}
		}
		return nil
	}
	lists := []struct {
		field  string
		values []string
	}{
		{"resources", k.Resources}, {"bases", k.Bases}, {"components", k.Components}, {"crds", k.Crds},
		{"configurations", k.Configurations},
	}
	for _, l := range lists {
		for i, v := range l.values {
			if err := check(fmt.Sprintf("%s[%d]", l.field, i), v); err != nil {
				return err
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(k.OpenAPI)) {
		if err := check("openapi."+key, k.OpenAPI[key]); err != nil {
			return err
		}
	}
	for i, p := range k.PatchesStrategicMerge {
		if err := check(fmt.Sprintf("patchesStrategicMerge[%d]", i), string(p)); err != nil {
			return err
		}
	}
	for _, l := range []struct {
		field   string
		patches []kustypes.Patch
	}{{"patches", k.Patches}, {"patchesJson6902", k.PatchesJson6902}} {
		for i, p := range l.patches {
			if err := check(fmt.Sprintf("%s[%d].path", l.field, i), p.Path); err != nil {
				return err
			}
		}
	}
	for i, r := range k.Replacements {
		if err := check(fmt.Sprintf("replacements[%d].path", i), r.Path); err != nil {
			return err
		}
	}
	for i, g := range k.ConfigMapGenerator {
		if err := checkGeneratorSources(file, fmt.Sprintf("configMapGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	for i, g := range k.SecretGenerator {
		if err := checkGeneratorSources(file, fmt.Sprintf("secretGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	// Charts in a kustomization are refused outright, wherever they would
	// come from: kustomize runs the helm program to pull and inflate them.
	if len(k.HelmCharts) > 0 {
		h := k.HelmCharts[0]
		return &RemoteResourceError{File: file, Field: "helmCharts[0]", Value: strings.TrimPrefix(h.Repo+"/"+h.Name, "/"), Problem: helmProblem}
	}
	if len(k.HelmChartInflationGenerator) > 0 {
		h := k.HelmChartInflationGenerator[0]
		return &RemoteResourceError{File: file, Field: "helmChartInflationGenerator[0]", Value: strings.TrimPrefix(h.ChartRepoURL+"/"+h.ChartName, "/"), Problem: helmProblem}
	}
	if g := k.HelmGlobals; g != nil {
		return &RemoteResourceError{File: file, Field: "helmGlobals", Value: g.ChartHome, Problem: helmProblem}
	}
	// Generators, transformers and validators are paths or inline plugin
	// configurations.
	for _, l := range []struct {
		field   string
		entries []string
	}{{"generators", k.Generators}, {"transformers", k.Transformers}, {"validators", k.Validators}} {
		for i, e := range l.entries {
			f := fmt.Sprintf("%s[%d]", l.field, i)
			if err := check(f, e); err != nil {
				return err
			}
			if err := checkPluginConfigs(file, f+" ", []byte(e)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkGeneratorSources checks the files and env files of a ConfigMap or
// Secret generator; a file source may be key=path.
func checkGeneratorSources(file, field string, s kustypes.KvPairSources) error {
	for i, src := range s.FileSources {
		for _, part := range append([]string{src}, strings.Split(src, "=")...) {
			if isRemote(part) {
				return &RemoteResourceError{File: file, Field: fmt.Sprintf("%s.files[%d]", field, i), Value: src}
			}
		}
	}
	for i, env := range s.EnvSources {
		if isRemote(env) {
			return &RemoteResourceError{File: file, Field: fmt.Sprintf("%s.envs[%d]", field, i), Value: env}
		}
	}
	if isRemote(s.EnvSource) {
		return &RemoteResourceError{File: file, Field: field + ".env", Value: s.EnvSource}
	}
	return nil
}

const helmProblem = "inflates a Helm chart with the helm program; Bundles render charts with spec.helm instead"

// pluginPathKeys are the top-level fields of builtin plugin configurations
// that name files kustomize loads (PatchTransformer and
// PatchJson6902Transformer path, PatchStrategicMergeTransformer paths,
// ConfigMapGenerator and SecretGenerator files, envs and env); the other is
// ReplacementTransformer's replacements[].path. Plugin configurations are
// decoded with case-insensitive field names.
var pluginPathKeys = map[string]bool{"path": true, "paths": true, "files": true, "envs": true, "env": true}

// checkPluginConfigs checks every builtin plugin configuration in data (YAML
// documents, parsed as kustomize parses them; lists of them too).
func checkPluginConfigs(file, fieldPrefix string, data []byte) error {
	nodes, err := kio.FromBytes(data)
	if err != nil {
		return nil
	}
	for _, n := range nodes {
		m, err := n.Map()
		if err != nil {
			continue
		}
		if err := walkPluginConfigs(file, fieldPrefix, m); err != nil {
			return err
		}
	}
	return nil
}

// walkPluginConfigs finds builtin plugin configurations (apiVersion
// "builtin") anywhere in v and checks their path fields.
func walkPluginConfigs(file, fieldPrefix string, v any) error {
	switch v := v.(type) {
	case map[string]any:
		if apiVersion, _ := v["apiVersion"].(string); strings.EqualFold(apiVersion, "builtin") {
			kind, _ := v["kind"].(string)
			if strings.EqualFold(kind, "HelmChartInflationGenerator") {
				name, _ := v["name"].(string)
				return &RemoteResourceError{File: file, Field: fieldPrefix + kind, Value: name, Problem: helmProblem}
			}
			if err := checkPluginPaths(file, fieldPrefix+kind, v); err != nil {
				return err
			}
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := walkPluginConfigs(file, fieldPrefix, v[k]); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := walkPluginConfigs(file, fieldPrefix, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPluginPaths checks the fields of one plugin configuration that name
// files.
func checkPluginPaths(file, field string, config map[string]any) error {
	check := func(key string, v any) error {
		for _, s := range stringsIn(v) {
			// A generator's file source may be key=path.
			for _, part := range append([]string{s}, strings.Split(s, "=")...) {
				if isRemote(part) {
					return &RemoteResourceError{File: file, Field: field + " " + key, Value: s}
				}
			}
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(config)) {
		switch lower := strings.ToLower(k); {
		case pluginPathKeys[lower]:
			if err := check(k, config[k]); err != nil {
				return err
			}
		case lower == "replacements":
			list, _ := config[k].([]any)
			for i, r := range list {
				m, _ := r.(map[string]any)
				for _, rk := range slices.Sorted(maps.Keys(m)) {
					if strings.EqualFold(rk, "path") {
						if err := check(fmt.Sprintf("%s[%d].%s", k, i, rk), m[rk]); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func stringsIn(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// scpUser is the user@ prefix of an scp-like git address (git@host:repo),
// as kustomize recognises it.
var scpUser = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// schemePrefix is any URL scheme followed by "://".
var schemePrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)

// isRemote reports whether kustomize could treat s as something to fetch.
// It is a superset of what kustomize itself accepts (its loader's
// IsRemoteFile, an http(s) URL, and its git repo spec parser: a git:: prefix,
// an ssh, https, http or file URL, an scp-like user@host:path, or a
// github.com/ path without scheme), and it ignores surrounding spaces, which
// kustomize does not.
func isRemote(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" {
		return false
	}
	lower := strings.ToLower(s)
	if strings.HasPrefix(lower, "git::") || schemePrefix.MatchString(s) || scpUser.MatchString(s) ||
		strings.HasPrefix(lower, "github.com/") || strings.HasPrefix(lower, "github.com:") {
		return true
	}
	if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return true
	}
	return false
}
