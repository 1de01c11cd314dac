package v1alpha1_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/dev/fleetcrds"
)

// statusDifferences are the status paths whose schema differs from Fleet's
// on purpose, with the reason. Every other status path we share with Fleet
// must have Fleet's type.
var statusDifferences = map[string]string{
	// metav1.Condition (what Kubernetes' own tooling and kstatus read)
	// instead of wrangler's GenericCondition: the same fields and types for
	// type/status/reason/message/lastTransitionTime, but metav1.Condition
	// requires them and adds observedGeneration; Fleet's lastUpdateTime is
	// not written. Readers of Fleet's conditions read ours.
	"status.conditions[]": "metav1.Condition, not wrangler's GenericCondition: type, status, reason, message and lastTransitionTime are required",
}

// TestSchemaMatchesFleet walks Fleet's published CRD schema (rancher/fleet
// 3b2c622c, dev/fleetcrds/testdata) and ours (charts/fleet/crds): every
// spec path of Fleet's must be ours, with Fleet's type, so every Bundle,
// BundleDeployment, GitRepo and GitRepoRestriction Fleet's users write is
// accepted and read back as written. Status paths are counted (the
// coverage is logged); GitRepo's must all be ours; those we have must have
// Fleet's type unless listed in statusDifferences.
func TestSchemaMatchesFleet(t *testing.T) {
	for _, tc := range []struct {
		plural string
		// topLevel: the kind's fields are at the top level, as
		// GitRepoRestriction's (it has no spec).
		topLevel bool
		// allStatus: every status path of Fleet's must be ours.
		allStatus bool
	}{
		{plural: "bundles"},
		{plural: "bundledeployments"},
		{plural: "gitrepos", allStatus: true},
		{plural: "gitreporestrictions", topLevel: true, allStatus: true},
	} {
		plural := tc.plural
		t.Run(plural, func(t *testing.T) {
			theirs, ours := schemas(t, plural)

			spec := fleetcrds.Under(theirs, "spec")
			if tc.topLevel {
				spec = topLevel(theirs)
			}
			var have int
			var strict []string
			for _, p := range spec {
				if o, ok := ours[p]; ok {
					have++
					if s := stricter(theirs[p], o); len(s) > 0 {
						strict = append(strict, p+" ("+strings.Join(s, ", ")+")")
					}
				}
				if msg := compare(p, theirs[p], ours); msg != "" {
					t.Errorf("%s: %s", p, msg)
				}
			}
			t.Logf("spec: %d of Fleet's %d paths (%.1f %%)", have, len(spec), percent(have, len(spec)))
			t.Logf("spec values we check and Fleet does not: %s", strings.Join(strict, ", "))

			status := fleetcrds.Under(theirs, "status")
			have = 0
			var missing []string
			for _, p := range status {
				if _, ok := ours[p]; !ok {
					missing = append(missing, p)
					continue
				}
				have++
				if reason, ok := differs(p); ok {
					t.Logf("%s: differs on purpose: %s", p, reason)
					continue
				}
				if msg := compare(p, theirs[p], ours); msg != "" {
					t.Errorf("%s: %s (add it to statusDifferences with the reason if on purpose)", p, msg)
				}
			}
			t.Logf("status: %d of Fleet's %d paths (%.1f %%); not here: %s", have, len(status), percent(have, len(status)), strings.Join(missing, ", "))
			if tc.allStatus {
				for _, p := range missing {
					if _, ok := differs(p); !ok {
						t.Errorf("status path %s of Fleet's is not ours (add it, or to statusDifferences with the reason)", p)
					}
				}
			}

			var extra []string
			mine := append(fleetcrds.Under(ours, "spec"), fleetcrds.Under(ours, "status")...)
			if tc.topLevel {
				mine = append(mine, topLevel(ours)...)
			}
			for _, p := range mine {
				if _, ok := theirs[p]; !ok {
					extra = append(extra, p)
				}
			}
			t.Logf("ours only: %s", strings.Join(extra, ", "))
		})
	}
}

// TestSchemaCheckFails proves the check sees a missing field and a wrong
// type: it removes and retypes paths of our schema and expects complaints.
func TestSchemaCheckFails(t *testing.T) {
	theirs, ours := schemas(t, "bundles")
	p := "spec.helm.repo"
	saved := ours[p]
	delete(ours, p)
	if compare(p, theirs[p], ours) == "" {
		t.Errorf("a missing %s was not reported", p)
	}
	saved.Type = "integer"
	ours[p] = saved
	if compare(p, theirs[p], ours) == "" {
		t.Errorf("%s typed integer was not reported", p)
	}
	q := "spec.rolloutStrategy.maxUnavailable"
	n := ours[q]
	n.IntOrString = false
	ours[q] = n
	if compare(q, theirs[q], ours) == "" {
		t.Errorf("%s without int-or-string was not reported", q)
	}
	v := "spec.helm.values"
	n = ours[v]
	n.PreserveUnknown = false
	ours[v] = n
	if compare(v, theirs[v], ours) == "" {
		t.Errorf("%s without x-kubernetes-preserve-unknown-fields was not reported", v)
	}
}

func schemas(t *testing.T, plural string) (theirs, ours map[string]fleetcrds.Node) {
	t.Helper()
	fc, err := fleetcrds.Fleet(plural)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := fleetcrds.Ours(plural)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := fleetcrds.Schema(fc)
	if err != nil {
		t.Fatal(err)
	}
	os, err := fleetcrds.Schema(oc)
	if err != nil {
		t.Fatal(err)
	}
	return fleetcrds.Paths(fs), fleetcrds.Paths(os)
}

// topLevel lists the paths of a kind without spec (GitRepoRestriction):
// every path but the object's metadata and status, sorted.
func topLevel(paths map[string]fleetcrds.Node) []string {
	var out []string
	for p := range paths {
		root := p
		if i := strings.IndexAny(p, ".[{"); i >= 0 {
			root = p[:i]
		}
		switch root {
		case "apiVersion", "kind", "metadata", "status":
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// differs reports whether p is, or is under, a path listed in
// statusDifferences.
func differs(p string) (string, bool) {
	for d, reason := range statusDifferences {
		if p == d || strings.HasPrefix(p, d+".") {
			return reason, true
		}
	}
	return "", false
}

// compare says how our schema at p differs from Fleet's in a way a client
// notices, or "" when it does not: missing, another type, int-or-string,
// a free-form object (preserve-unknown-fields) or a map, a null Fleet
// accepts in a list or map value (elsewhere a null is pruned, so
// accepted), or a property we require and Fleet does not.
func compare(p string, theirs fleetcrds.Node, ours map[string]fleetcrds.Node) string {
	o, ok := ours[p]
	if !ok {
		return "missing"
	}
	var diffs []string
	if o.Type != theirs.Type {
		diffs = append(diffs, fmt.Sprintf("type %q, Fleet's %q", o.Type, theirs.Type))
	}
	if o.IntOrString != theirs.IntOrString {
		diffs = append(diffs, fmt.Sprintf("x-kubernetes-int-or-string %v, Fleet's %v", o.IntOrString, theirs.IntOrString))
	}
	if o.PreserveUnknown != theirs.PreserveUnknown {
		diffs = append(diffs, fmt.Sprintf("x-kubernetes-preserve-unknown-fields %v, Fleet's %v", o.PreserveUnknown, theirs.PreserveUnknown))
	}
	if o.Map != theirs.Map {
		diffs = append(diffs, fmt.Sprintf("map (additionalProperties) %v, Fleet's %v", o.Map, theirs.Map))
	}
	if theirs.Element && theirs.Nullable && !o.Nullable {
		diffs = append(diffs, "Fleet accepts null here, we refuse it")
	}
	return strings.Join(diffs, "; ")
}

// stricter says which value checks we make at p that Fleet does not
// (a required property, an enum, a pattern, a length or bound): values
// Fleet's API server accepts and ours refuses with a clear message.
func stricter(theirs, ours fleetcrds.Node) []string {
	var out []string
	for _, r := range ours.Required {
		if !slices.Contains(theirs.Required, r) {
			out = append(out, "requires "+r)
		}
	}
	for _, r := range ours.Restrictions {
		if !slices.Contains(theirs.Restrictions, r) {
			out = append(out, r)
		}
	}
	return out
}

func percent(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}
