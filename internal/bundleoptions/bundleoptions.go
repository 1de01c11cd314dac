// Package bundleoptions says, for every option of Fleet's Bundle, what
// fleet does with it (Table), and finds the options a Bundle sets that
// fleet does not do yet (Unsupported), so no option is silently ignored:
// the Bundle reconciler and `fleet render bundle` refuse such a Bundle
// with a message naming the option. It links neither Helm nor kustomize.
package bundleoptions

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Support is what fleet does with an option.
type Support string

const (
	// Implemented: the option has Fleet's meaning (Why says how, when it
	// differs in form).
	Implemented Support = "implemented"
	// NoEffect: accepted without effect; Why says why that is Fleet's
	// meaning here.
	NoEffect Support = "accepted without effect"
	// NotYet: a Bundle setting the option (see Option.Set) is not
	// deployed, with Why as the message: deploying it without the option
	// would deploy something else than its author asked for.
	NotYet Support = "not yet"
)

// Option is one option path of a Bundle's spec, relative to spec.
// A path whose first part is a field of BundleDeploymentOptions is an
// option of the Bundle and of each target: it is looked for at spec.<path>
// and spec.targets[i].<path>. A path under targets[] is a field of the
// targets themselves; any other path is a field of the Bundle only.
type Option struct {
	Path    string
	Support Support
	Why     string
	// Set says whether a value counts as set (the default: a non-zero
	// value; an object is set when one of its fields is, so `ignore: {}`
	// is not).
	Set func(v any) bool
}

// Table has one row per option path, sorted by path. Rows of options
// implemented later change here (and in docs/operations.md "Bundle options
// (Fleet compatibility)", which a test keeps in step): one line each.
var Table = []Option{
	{Path: "allowedTargetNamespaceSelector", Support: NotYet, Why: "target namespace restrictions (from GitRepoRestrictions) are not enforced yet"},
	{Path: "contentsId", Support: Implemented, Why: "Fleet's meaning (the resources are elsewhere, under this ID), kept in immutable Secrets of the Bundle's namespace: `fleet apply` and the GitRepo source write a Bundle whose resources are over 1 MiB of JSON that way; the controller reads and checks them (Fleet's `Content` objects and OCI storage are not read)"},
	{Path: "correctDrift.enabled", Support: Implemented, Why: "the agent reverts drift with server-side apply"},
	{Path: "correctDrift.force", Support: Implemented, Why: "objects that cannot be patched back are deleted and created again"},
	{Path: "correctDrift.keepFailHistory", Support: NoEffect, Why: "it keeps failed Helm releases; there are no Helm releases here"},
	{Path: "createNamespace", Support: Implemented, Why: "unset or `true`: the agent makes the target namespace (`namespace`, else `defaultNamespace`) when it is missing, as before", Set: isFalse},
	{Path: "defaultNamespace", Support: Implemented},
	{Path: "deleteCRDResources", Support: Implemented, Why: "CustomResourceDefinitions a Bundle applied stay downstream by default, when they leave the Bundle and when the BundleDeployment is..."},
	{Path: "deleteNamespace", Support: Implemented, Why: "when the BundleDeployment goes (the Bundle is deleted, or the cluster leaves its targets) the agent deletes the target namespace..."},
	{Path: "dependsOn", Support: Implemented, Why: "as Fleet, checked by the agent on its own cluster: a new deployment waits until the Bundles it depends on are in an accepted state there"},
	{Path: "diff.comparePatches", Support: Implemented, Why: "as Fleet, in the agent's drift check: `jsonPointers` are removed from both the live object and what the Bundle would make of it, for..."},
	{Path: "downstreamResources", Support: Implemented, Why: "the controller reads each named Secret or ConfigMap (`kind` in any case, as Fleet) from the Bundle's own namespace and adds a copy..."},
	{Path: "forceSyncGeneration", Support: Implemented},
	{Path: "helm.atomic", Support: Implemented, Why: "a deployment that does not become ready within its health timeout (`helm.timeoutSeconds`, else 2 min) is replaced by the newest earlier..."},
	{Path: "helm.chart", Support: Implemented, Why: "a directory of the Bundle's resources; a chart named by URL (`oci://`, `https://`) is rendered from the copy the GitRepo source..."},
	{Path: "helm.disableDNS", Support: NoEffect, Why: "templates never resolve DNS here (Helm's `getHostByName` answers nothing in a render worker, which has no network"},
	{Path: "helm.disableDependencyUpdate", Support: NoEffect, Why: "the renderer never fetches dependencies, it renders the chart's `charts/` as the Bundle holds them (Fleet's..."},
	{Path: "helm.disablePreProcess", Support: Implemented, Why: "as Fleet: no `${ }` templating and no `templateValues`"},
	{Path: "helm.force", Support: Implemented, Why: "a change to an immutable field (a Job's template, an immutable ConfigMap, a Service's `clusterIP`) is applied by deleting and recreating..."},
	{Path: "helm.maxHistory", Support: Implemented, Why: "how many deployments that became Ready are kept per BundleDeployment to go back to, the one in force included (as Helm counts..."},
	{Path: "helm.releaseName", Support: Implemented},
	{Path: "helm.repo", Support: Implemented, Why: "the GitRepo source (or `fleet apply`) fetches the chart and embeds it in the Bundle under `.chart/<sha256>/` (Fleet's layout);..."},
	{Path: "helm.skipSchemaValidation", Support: Implemented, Why: "as Fleet (Helm's option): the values are not checked against the charts' `values.schema.json`"},
	{Path: "helm.takeOwnership", Support: Implemented, Why: "always on: server-side apply takes over resources that exist"},
	{Path: "helm.templateValues", Support: Implemented, Why: "as Fleet: each entry a `${ }` template, rendered per cluster, read as YAML and set as the top-level value of its key (over `helm.values`)"},
	{Path: "helm.timeoutSeconds", Support: Implemented, Why: "bounds the health wait after an apply"},
	{Path: "helm.values", Support: Implemented},
	{Path: "helm.valuesFiles", Support: Implemented},
	{Path: "helm.valuesFrom", Support: Implemented, Why: "read upstream by the controller, in the Bundle's own namespace only (`namespace` empty or equal to it"},
	{Path: "helm.version", Support: Implemented, Why: "the version or semver range the GitRepo source resolves in the repository when it fetches the chart; kept in the Bundle..."},
	{Path: "helm.waitForJobs", Support: Implemented, Why: "always on: the health wait counts a Job ready when it completed (kstatus)"},
	{Path: "helmOpOptions.helmOpCABundle", Support: NotYet, Why: "Bundles of HelmOps are not supported yet"},
	{Path: "helmOpOptions.helmOpInsecureSkipTLSVerify", Support: NotYet, Why: "Bundles of HelmOps are not supported yet"},
	{Path: "helmOpOptions.helmOpSecretName", Support: NotYet, Why: "Bundles of HelmOps are not supported yet"},
	{Path: "ignore.conditions", Support: Implemented, Why: "as Fleet: a resource's status condition having every key/value of one of the maps (`{type: Ready, status: \"False\"}`) is left out before..."},
	{Path: "keepResources", Support: Implemented},
	{Path: "kustomize.dir", Support: Implemented},
	{Path: "namespace", Support: Implemented},
	{Path: "namespaceAnnotations", Support: Implemented},
	{Path: "namespaceLabels", Support: Implemented},
	{Path: "overwrites", Support: NotYet, Why: "taking resources over from another Bundle is not supported yet"},
	{Path: "paused", Support: Implemented},
	{Path: "resources", Support: Implemented},
	{Path: "rolloutStrategy.autoPartitionSize", Support: Implemented, Why: "without `partitions`, from the threshold on: consecutive partitions of this many clusters (number or percentage of the targeted..."},
	{Path: "rolloutStrategy.autoPartitionThreshold", Support: Implemented, Why: "without `partitions`: fewer targeted clusters than this (default 200) make one partition, `All`"},
	{Path: "rolloutStrategy.maxNew", Support: Implemented, Why: "BundleDeployments one pass creates (default 50, also without a strategy)"},
	{Path: "rolloutStrategy.maxUnavailable", Support: Implemented, Why: "number or percentage (default 100 %) of the targeted clusters that may be unavailable: a cluster gets the change only while fewer are,..."},
	{Path: "rolloutStrategy.maxUnavailablePartitions", Support: Implemented, Why: "number or percentage (default 0) of partitions that may be unavailable: the pass stops after the partition that makes one more"},
	{Path: "rolloutStrategy.partitions", Support: Implemented, Why: "in order, each with the clusters it selects by `clusterName`, `clusterSelector`, `clusterGroup`, `clusterGroupSelector` (every one given..."},
	{Path: "serviceAccount", Support: Implemented},
	{Path: "targetCustomizationMode", Support: Implemented, Why: "`FirstMatch` (default): a cluster takes the options of the first target that selects it", Set: isAllMatches},
	{Path: "targetRestrictions", Support: Implemented, Why: "an allow list (`fleet apply` writes it from a GitRepo's targets): with restrictions, a target selects only clusters one restriction also..."},
	{Path: "targets", Support: Implemented},
	{Path: "targets[].clusterGroup", Support: Implemented},
	{Path: "targets[].clusterGroupSelector", Support: Implemented},
	{Path: "targets[].clusterName", Support: Implemented},
	{Path: "targets[].clusterSelector", Support: Implemented},
	{Path: "targets[].doNotDeploy", Support: Implemented},
	{Path: "targets[].name", Support: Implemented},
	{Path: "valuesHash", Support: Implemented, Why: "Fleet's meaning: the Helm values (`values.yaml`, and one key per target name) are in the Secret named like the Bundle, in its namespace, as Fleet's `fleet apply` and Rancher's managed charts write it; the controller reads it, checks the hash, renders with its values and keeps them out of the BundleDeployments (internal/valuessecret)"},
	{Path: "yaml.overlays", Support: Implemented, Why: "plain-manifest Bundles only (no `helm.chart`, no `kustomize.dir`): for each overlay name in order (targets' overlays follow the..."},
}

// Finding is a not-yet option a Bundle sets.
type Finding struct {
	// Path is where: spec.helm.repo, spec.targets[1].helm.repo.
	Path    string
	Message string
}

func (f Finding) String() string { return f.Path + ": " + f.Message }

// Error is the refusal of a Bundle that sets options fleet does not do
// yet: every finding, in table order (the Bundle's own before its
// targets').
type Error struct{ Findings []Finding }

func (e *Error) Error() string {
	parts := make([]string, len(e.Findings))
	for i, f := range e.Findings {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// Check returns an *Error when the Bundle sets an option fleet does not do
// yet, or nil.
func Check(spec *fleet.BundleSpec) error {
	if f := Unsupported(spec); len(f) > 0 {
		return &Error{Findings: f}
	}
	return nil
}

// Unsupported lists the not-yet options the Bundle sets.
func Unsupported(spec *fleet.BundleSpec) []Finding {
	doc, err := toJSON(spec)
	if err != nil {
		// The spec came from JSON: it encodes. Say so rather than pass.
		return []Finding{{Path: "spec", Message: fmt.Sprintf("cannot read the Bundle's options: %v", err)}}
	}
	targets, _ := doc["targets"].([]any)
	var out []Finding
	for _, o := range Table {
		if o.Support != NotYet {
			continue
		}
		set := o.Set
		if set == nil {
			set = nonZero
		}
		if v, ok := lookup(doc, o.Path); ok && set(v) {
			out = append(out, Finding{Path: "spec." + o.Path, Message: o.Why})
		}
		if !IsOption(o.Path) {
			continue
		}
		for i, t := range targets {
			tm, _ := t.(map[string]any)
			if v, ok := lookup(tm, o.Path); ok && set(v) {
				out = append(out, Finding{Path: fmt.Sprintf("spec.targets[%d].%s", i, o.Path), Message: o.Why})
			}
		}
	}
	return out
}

// IsOption reports whether path is an option of the Bundle and of each
// target (its first part is a field of BundleDeploymentOptions).
func IsOption(path string) bool {
	first, _, _ := strings.Cut(path, ".")
	return optionFields[first]
}

var optionFields = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(fleet.BundleDeploymentOptions{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}()

func toJSON(spec *fleet.BundleSpec) (map[string]any, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(b, &doc)
}

func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// nonZero: true, a number other than 0, a non-empty string or list, an
// object with a field that is set.
func nonZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		for _, e := range v {
			if nonZero(e) {
				return true
			}
		}
		return false
	}
	return true
}

func isFalse(v any) bool { return v == false }

func isAllMatches(v any) bool { return v == string(fleet.TargetCustomizationModeAllMatches) }
