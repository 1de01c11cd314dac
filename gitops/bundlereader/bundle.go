package bundlereader

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// compressAbove is the Bundle size (JSON) from which fleet apply stores
// every resource base64+gz, as Fleet does.
const compressAbove = 1000000

// helmRef is one helm options block of a Bundle and the fleet.yaml field
// it came from.
type helmRef struct {
	field string
	helm  *fleet.HelmOptions
}

// readBundle reads the Bundle of directory dir (relative to the checkout);
// nil without error: the directory has no resources (Fleet leaves it out).
func (r *reader) readBundle(ctx context.Context, dir string) (*Bundle, error) {
	abs := r.abs(dir)
	fy := &FleetYAML{}
	optsFile := ""
	for _, n := range fleetYAMLNames {
		data, err := r.readInside(dir, n)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(dir, n), unwrapPathError(err))
		}
		optsFile = n
		if fy, err = parseFleetYAML(path.Join(dir, n), data); err != nil {
			return nil, err
		}
		break
	}
	spec := fy.BundleSpec.DeepCopy()
	nTargets := len(spec.Targets)
	spec.Targets = append(spec.Targets, fy.TargetCustomizations...)
	for i := range spec.Targets {
		if spec.Targets[i].Name == "" {
			spec.Targets[i].Name = fmt.Sprintf("target%03d", i)
		}
	}
	// A target's helm takes the chart, repo and version of the Bundle's
	// when it names none (Fleet: each target's chart is fetched as named).
	helms := []helmRef{}
	if spec.Helm != nil {
		helms = append(helms, helmRef{"helm", spec.Helm})
	}
	for i := range spec.Targets {
		h := spec.Targets[i].Helm
		if h == nil {
			continue
		}
		if spec.Helm != nil {
			if h.Repo == "" {
				h.Repo = spec.Helm.Repo
			}
			if h.Chart == "" {
				h.Chart = spec.Helm.Chart
			}
			if h.Version == "" {
				h.Version = spec.Helm.Version
			}
		}
		field := fmt.Sprintf("targets[%d].helm", i)
		if i >= nTargets {
			field = fmt.Sprintf("targetCustomizations[%d].helm", i-nTargets)
		}
		helms = append(helms, helmRef{field, h})
	}

	exclude := map[string]bool{}
	if optsFile != "" {
		exclude[optsFile] = true
	}
	fieldFile := path.Join(dir, optsFile)
	if optsFile == "" {
		fieldFile = path.Join(dir, "fleet.yaml")
	}
	var errs []error
	for _, h := range helms {
		if err := r.mergeValuesFiles(dir, fieldFile, h, exclude); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	l := &loader{ctx: ctx, dir: abs, rel: dir, exclude: exclude, limits: r.limits}
	files, err := l.load()
	if err != nil {
		return nil, err
	}
	digests, err := r.addCharts(ctx, dir, fieldFile, helms, files, l.total)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, nil
	}

	b := &fleet.Bundle{
		TypeMeta:   metav1.TypeMeta{APIVersion: fleet.GroupVersion.String(), Kind: "Bundle"},
		ObjectMeta: metav1.ObjectMeta{Name: BundleName(r.repo, dir), Namespace: r.opts.Namespace},
		Spec:       *spec,
	}
	if fy.Name != "" {
		b.Name = fy.Name
	}
	b.Labels = r.labels(fy.Labels)
	r.applyOptions(b, fy)
	if b.Spec.Resources, err = r.encode(b, files); err != nil {
		return nil, fmt.Errorf("%w (Bundle %s)", err, b.Name)
	}
	return &Bundle{Path: dir, Bundle: b, ChartDigests: digests}, nil
}

// labels are --label, then fleet.yaml's, then the repository and commit.
func (r *reader) labels(own map[string]string) map[string]string {
	out := map[string]string{}
	maps.Copy(out, r.opts.Labels)
	maps.Copy(out, own)
	out[fleet.RepoLabel] = r.repo
	if r.opts.Commit != "" {
		out[fleet.CommitLabel] = r.opts.Commit
	} else {
		delete(out, fleet.CommitLabel)
	}
	return out
}

// applyOptions lays the GitRepo's options over the Bundle, in Fleet's order.
func (r *reader) applyOptions(b *fleet.Bundle, fy *FleetYAML) {
	o := r.opts
	if o.ServiceAccount != "" {
		b.Spec.ServiceAccount = o.ServiceAccount
	}
	b.Spec.ForceSyncGeneration = o.SyncGeneration
	if fy.OverrideTargets != nil {
		for _, t := range fy.OverrideTargets {
			b.Spec.Targets = append(b.Spec.Targets, fleet.BundleTarget{
				Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector.DeepCopy(),
				ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector.DeepCopy(),
			})
			b.Spec.TargetRestrictions = append(b.Spec.TargetRestrictions, *t.DeepCopy())
		}
	} else {
		for _, t := range o.Targets {
			b.Spec.Targets = append(b.Spec.Targets, *t.DeepCopy())
		}
		for _, t := range o.TargetRestrictions {
			b.Spec.TargetRestrictions = append(b.Spec.TargetRestrictions, *t.DeepCopy())
		}
	}
	if len(b.Spec.Targets) == 0 {
		b.Spec.Targets = []fleet.BundleTarget{{Name: "default", ClusterGroup: "default"}}
	}
	if o.TargetNamespace != "" {
		b.Spec.TargetNamespace = o.TargetNamespace
		for i := range b.Spec.Targets {
			b.Spec.Targets[i].TargetNamespace = o.TargetNamespace
		}
	}
	if o.Paused {
		b.Spec.Paused = true
	}
	if o.KeepResources {
		b.Spec.KeepResources = true
	}
	if o.DeleteNamespace {
		b.Spec.DeleteNamespace = true
	}
	if o.CorrectDrift != nil && o.CorrectDrift.Enabled {
		b.Spec.CorrectDrift = o.CorrectDrift.DeepCopy()
	}
}

// mergeValuesFiles merges a helm block's valuesFiles into its values, as
// Fleet's fleet apply does (each file over the values before it, so files
// win over inline values), and takes the files out of the resources. The
// Bundle keeps no valuesFiles: their content is in values.
func (r *reader) mergeValuesFiles(dir, fieldFile string, h helmRef, exclude map[string]bool) error {
	if len(h.helm.ValuesFiles) == 0 {
		return nil
	}
	var merged map[string]any
	if h.helm.Values != nil {
		merged = h.helm.Values.DeepCopy().Data
	}
	for i, vf := range h.helm.ValuesFiles {
		field := fmt.Sprintf("%s.valuesFiles[%d]", h.field, i)
		clean := path.Clean(filepath.ToSlash(vf))
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return &FieldError{File: fieldFile, Field: field, Err: fmt.Errorf("%q must be a file inside %s", vf, dir)}
		}
		exclude[clean] = true
		exclude[path.Base(clean)] = true
		data, err := r.readInside(dir, clean)
		if err != nil {
			return &FieldError{File: fieldFile, Field: field, Err: fmt.Errorf("%q: %w", vf, unwrapPathError(err))}
		}
		var values map[string]any
		if err := yaml.Unmarshal(data, &values); err != nil {
			return &FieldError{File: path.Join(dir, clean), Err: fmt.Errorf("not a YAML map of Helm values: %w", err)}
		}
		merged = mergeMaps(merged, values)
	}
	if len(merged) > 0 {
		h.helm.Values = &fleet.GenericMap{Data: merged}
	}
	h.helm.ValuesFiles = nil
	return nil
}

// readInside reads file rel of Bundle directory dir, following a symbolic
// link only to a file inside dir: fleet apply's own inputs must not be the
// machine's files.
func (r *reader) readInside(dir, rel string) ([]byte, error) {
	full := r.abs(path.Join(dir, rel))
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		return nil, err
	}
	base, err := filepath.EvalSymlinks(r.abs(dir))
	if err != nil {
		return nil, err
	}
	if rp, err := filepath.Rel(base, resolved); err != nil || rp == ".." || strings.HasPrefix(rp, ".."+string(filepath.Separator)) {
		return nil, &os.PathError{Op: "read", Path: path.Join(dir, rel), Err: fmt.Errorf("%s is a symbolic link to outside %s", path.Join(dir, rel), dir)}
	}
	return readLimited(resolved, r.limits.FileBytes)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// mergeMaps merges over into base: maps merge key by key, anything else
// from over replaces.
func mergeMaps(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	maps.Copy(out, base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeMaps(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// encode makes the Bundle's resources from its files, sorted by name:
// plain text, or base64+gz for binary files, for all of them when asked
// or when the Bundle would reach 1 MB (Fleet's rule), and refuses a Bundle
// over the limit.
func (r *reader) encode(b *fleet.Bundle, files map[string][]byte) ([]fleet.BundleResource, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	build := func(compress bool) ([]fleet.BundleResource, error) {
		out := make([]fleet.BundleResource, 0, len(names))
		for _, n := range names {
			data := files[n]
			if !compress && utf8.Valid(data) {
				out = append(out, fleet.BundleResource{Name: n, Content: string(data)})
				continue
			}
			gz, err := base64GZ(data)
			if err != nil {
				return nil, err
			}
			out = append(out, fleet.BundleResource{Name: n, Content: gz, Encoding: "base64+gz"})
		}
		return out, nil
	}
	size := func(res []fleet.BundleResource) (int64, error) {
		c := *b
		c.Spec.Resources = res
		data, err := json.Marshal(&c)
		return int64(len(data)), err
	}
	res, err := build(r.opts.Compress)
	if err != nil {
		return nil, err
	}
	n, err := size(res)
	if err != nil {
		return nil, err
	}
	// Fleet compresses from 1 MB; a Bundle over the limit is compressed
	// before it is refused.
	if (n >= compressAbove || n > r.limits.BundleBytes) && !r.opts.Compress {
		if res, err = build(true); err != nil {
			return nil, err
		}
		if n, err = size(res); err != nil {
			return nil, err
		}
	}
	if n > r.limits.BundleBytes {
		return nil, fmt.Errorf("the Bundle is %s even compressed, over the limit of %s (what a Bundle's contents hold); leave files out with .fleetignore or split the directory", formatBytes(n), formatBytes(r.limits.BundleBytes))
	}
	return res, nil
}

func base64GZ(data []byte) (string, error) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(data); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// chartPrefix is where a fetched chart's files go in the Bundle: Fleet's
// ".chart/<sha256 of chart:repo:version>", where its agent looks for them.
func chartPrefix(h *fleet.HelmOptions) string {
	return fmt.Sprintf(".chart/%x", sha256.Sum256([]byte(h.Chart+":"+h.Repo+":"+h.Version)))
}
