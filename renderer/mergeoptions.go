package renderer

import (
	"maps"
	"slices"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// mergeMoreOptions lays the rest of a target's options over the Bundle's
// (MergeOptions handles the ones it always had), as Fleet's controller
// merges them: a set scalar or pointer wins, flags are or-ed, maps are
// merged key by key, lists of named things (comparePatches, valuesFrom,
// downstreamResources, overwrites, ignore.conditions) are merged by their
// identity with the target's entry winning, overlays are appended. A
// target that sets nothing (fleet apply writes `ignore: {}` in every
// target) changes nothing.
func mergeMoreOptions(out *fleet.BundleDeploymentOptions, over fleet.BundleDeploymentOptions) {
	if over.YAML != nil {
		if out.YAML == nil {
			out.YAML = &fleet.YAMLOptions{}
		}
		out.YAML.Overlays = append(out.YAML.Overlays, over.YAML.Overlays...)
	}
	if over.CreateNamespace != nil {
		v := *over.CreateNamespace
		out.CreateNamespace = &v
	}
	if over.Diff != nil {
		if out.Diff == nil {
			out.Diff = &fleet.DiffOptions{}
		}
		out.Diff.ComparePatches = mergeByKey(out.Diff.ComparePatches, over.Diff.ComparePatches, func(p fleet.ComparePatch) string {
			return p.APIVersion + "|" + p.Kind + "|" + p.Namespace + "|" + p.Name
		})
	}
	out.DeleteNamespace = out.DeleteNamespace || over.DeleteNamespace
	if over.IgnoreOptions != nil {
		if out.IgnoreOptions == nil {
			out.IgnoreOptions = &fleet.IgnoreOptions{}
		}
		out.IgnoreOptions.Conditions = mergeByKey(out.IgnoreOptions.Conditions, over.IgnoreOptions.Conditions, conditionKey)
	}
	out.DeleteCRDResources = out.DeleteCRDResources || over.DeleteCRDResources
	out.DownstreamResources = mergeByKey(out.DownstreamResources, over.DownstreamResources, func(r fleet.DownstreamResource) string {
		return strings.ToLower(r.Kind) + "|" + r.Name
	})
	out.Overwrites = mergeByKey(out.Overwrites, over.Overwrites, func(r fleet.OverwrittenResource) string {
		return strings.ToLower(r.Kind) + "|" + r.Namespace + "|" + r.Name
	})
	if over.AllowedTargetNamespaceSelector != nil {
		out.AllowedTargetNamespaceSelector = over.AllowedTargetNamespaceSelector.DeepCopy()
	}
	if h := over.Helm; h != nil {
		if out.Helm == nil {
			out.Helm = &fleet.HelmOptions{}
		}
		o := out.Helm
		if h.Repo != "" {
			o.Repo = h.Repo
		}
		if h.Version != "" {
			o.Version = h.Version
		}
		if len(h.TemplateValues) > 0 {
			if o.TemplateValues == nil {
				o.TemplateValues = map[string]string{}
			}
			maps.Copy(o.TemplateValues, h.TemplateValues)
		}
		o.ValuesFrom = mergeByKey(o.ValuesFrom, h.ValuesFrom, valuesFromKey)
		if h.MaxHistory != 0 {
			o.MaxHistory = h.MaxHistory
		}
		o.Force = o.Force || h.Force
		o.WaitForJobs = o.WaitForJobs || h.WaitForJobs
		o.Atomic = o.Atomic || h.Atomic
		o.DisablePreProcess = o.DisablePreProcess || h.DisablePreProcess
		o.DisableDNS = o.DisableDNS || h.DisableDNS
		o.SkipSchemaValidation = o.SkipSchemaValidation || h.SkipSchemaValidation
		o.DisableDependencyUpdate = o.DisableDependencyUpdate || h.DisableDependencyUpdate
	}
}

// mergeByKey keeps base's entries in order, replaces those over has an
// entry of the same key for, and appends over's new ones. Entries without
// a key are always appended.
func mergeByKey[T any](base, over []T, key func(T) string) []T {
	if len(over) == 0 {
		return base
	}
	out := append([]T(nil), base...)
	at := map[string]int{}
	for i, e := range out {
		if k := key(e); k != "" {
			at[k] = i
		}
	}
	for _, e := range over {
		k := key(e)
		if i, ok := at[k]; ok && k != "" {
			out[i] = e
			continue
		}
		if k != "" {
			at[k] = len(out)
		}
		out = append(out, e)
	}
	return out
}

func valuesFromKey(v fleet.ValuesFrom) string {
	switch {
	case v.ConfigMapKeyRef != nil:
		return "configmap|" + v.ConfigMapKeyRef.Namespace + "|" + v.ConfigMapKeyRef.Name + "|" + v.ConfigMapKeyRef.Key
	case v.SecretKeyRef != nil:
		return "secret|" + v.SecretKeyRef.Namespace + "|" + v.SecretKeyRef.Name + "|" + v.SecretKeyRef.Key
	}
	return ""
}

// conditionKey identifies an ignore.conditions entry by its whole content.
func conditionKey(c map[string]string) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + c[k] + "\x00")
	}
	return b.String()
}
