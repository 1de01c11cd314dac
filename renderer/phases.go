package renderer

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/hooks"
	"github.com/gitops-fleet/fleet/internal/manifest"
)

// phaseDoc is one rendered object and the text it was rendered as.
type phaseDoc struct {
	obj  *unstructured.Unstructured
	text string
	// listedIn is the phase the document is written under, once written.
	listedIn bundlecontent.Phase
}

// AlsoRunsMarker starts the comment that stands, in a later phase, for a
// hook of several events written under an earlier one.
const AlsoRunsMarker = "# fleet.cattle.io/also-runs: "

func objName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// orderPhases lays a Bundle's rendered manifests out phase by phase
// (bundlecontent.JoinPhases), in the order the agent applies them: CRDs,
// pre-install and pre-upgrade hooks, the main objects, post-install and
// post-upgrade hooks, pre-delete and post-delete hooks (internal/hooks
// says which object goes where). Within a hook phase, hooks are ordered as
// Helm runs them (hooks.Compare); CRDs and main objects keep the order the
// chart or the files gave them. Test and rollback hooks, and hooks of
// events Helm does not know, are left out: nothing runs them.
//
// A hook of several events (pre-install,pre-upgrade) is written once,
// under its first phase, and stands in the others as an AlsoRunsMarker
// comment; the agent reads a hook's events from its annotation.
//
// Manifests with only main objects are returned unchanged, without
// markers: the content of a Bundle without hooks or CRDs is what it has
// always been, so upgrading the controller does not redeploy it.
func orderPhases(manifests []byte) ([]byte, error) {
	var docs []phaseDoc
	for _, text := range bundlecontent.SplitDocuments(manifests) {
		objs, err := manifest.Decode([]byte(text))
		if err != nil {
			return nil, err
		}
		if len(objs) == 1 {
			if !strings.HasPrefix(text, "---") {
				text = "---\n" + text
			}
			docs = append(docs, phaseDoc{obj: objs[0], text: text})
			continue
		}
		for _, o := range objs {
			y, err := yaml.Marshal(o.Object)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
			docs = append(docs, phaseDoc{obj: o, text: "---\n" + string(y)})
		}
	}
	byPhase := map[bundlecontent.Phase][]*phaseDoc{}
	onlyMain := true
	for i := range docs {
		d := &docs[i]
		ps := hooks.Phases(d.obj)
		if len(ps) != 1 || ps[0] != bundlecontent.PhaseMain {
			onlyMain = false
		}
		for _, p := range ps {
			byPhase[p] = append(byPhase[p], d)
		}
	}
	if onlyMain {
		return manifests, nil
	}
	var sections []bundlecontent.Section
	for _, p := range bundlecontent.Phases {
		ds := byPhase[p]
		if len(ds) == 0 {
			continue
		}
		if p != bundlecontent.PhaseCRDs && p != bundlecontent.PhaseMain {
			slices.SortStableFunc(ds, func(a, b *phaseDoc) int { return hooks.Compare(a.obj, b.obj) })
		}
		s := bundlecontent.Section{Phase: p}
		for _, d := range ds {
			if d.listedIn != "" {
				// A hook of several events is written once (an agent that
				// does not know phases must not see it twice); later
				// phases show where it runs with a comment.
				s.YAML = fmt.Appendf(s.YAML, "---\n%s%s %s (written under phase %s)\n", AlsoRunsMarker, d.obj.GetKind(), objName(d.obj), d.listedIn)
				continue
			}
			d.listedIn = p
			s.YAML = append(s.YAML, d.text...)
			if n := len(s.YAML); n > 0 && s.YAML[n-1] != '\n' {
				s.YAML = append(s.YAML, '\n')
			}
		}
		sections = append(sections, s)
	}
	return bundlecontent.JoinPhases(sections), nil
}
