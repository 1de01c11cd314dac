package bundlecontent

import (
	"bytes"
	"fmt"
	"strings"
)

// Phase is one step of applying a BundleDeployment's content. The content
// lists its objects phase by phase, in the order they are applied (see
// Phases); what each phase means is package internal/hooks'.
type Phase string

const (
	// PhaseCRDs: CustomResourceDefinitions (a chart's crds/ and any other),
	// applied first and waited for until Established.
	PhaseCRDs Phase = "crds"
	// PhasePreInstall and PhasePreUpgrade: Helm hooks run before the main
	// objects, on the first deployment to a cluster and on later ones.
	PhasePreInstall Phase = "pre-install"
	PhasePreUpgrade Phase = "pre-upgrade"
	// PhaseMain: the ordinary objects, the inventory.
	PhaseMain Phase = "main"
	// PhasePostInstall and PhasePostUpgrade: hooks run after them.
	PhasePostInstall Phase = "post-install"
	PhasePostUpgrade Phase = "post-upgrade"
	// PhasePreDelete and PhasePostDelete: hooks run when the
	// BundleDeployment is deleted, before and after its objects are pruned.
	PhasePreDelete  Phase = "pre-delete"
	PhasePostDelete Phase = "post-delete"
)

// Phases lists every phase in the order content holds them.
var Phases = []Phase{PhaseCRDs, PhasePreInstall, PhasePreUpgrade, PhaseMain, PhasePostInstall, PhasePostUpgrade, PhasePreDelete, PhasePostDelete}

func knownPhase(p Phase) bool {
	for _, k := range Phases {
		if k == p {
			return true
		}
	}
	return false
}

// PhaseMarker starts the comment that heads a phase's documents. A
// marker is a YAML document holding only that comment line:
//
//	---
//	# fleet.cattle.io/phase: pre-install
//
// so a reader that does not know phases (an agent older than them, any
// YAML tool) sees an empty document and skips it, and a person reading
// `fleet render bundle` sees where each phase starts.
const PhaseMarker = "# fleet.cattle.io/phase: "

// Section is the documents of one phase.
type Section struct {
	Phase Phase
	// YAML is the phase's documents, multi-document YAML.
	YAML []byte
}

// JoinPhases writes sections as content: each under its marker, in the
// order given (the writer gives them in Phases order, empty ones left out).
func JoinPhases(sections []Section) []byte {
	var b bytes.Buffer
	for _, s := range sections {
		fmt.Fprintf(&b, "---\n%s%s\n", PhaseMarker, s.Phase)
		y := bytes.TrimLeft(s.YAML, "\n")
		if !bytes.HasPrefix(y, []byte("---")) {
			b.WriteString("---\n")
		}
		b.Write(y)
		if len(y) > 0 && y[len(y)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// SplitPhases reads content back into its sections. Content without any
// marker (written by a controller older than phases, or a Bundle with
// neither hooks nor CRDs) is one PhaseMain section: what such content has
// always meant. An unknown phase, a phase twice or out of order, or
// documents before the first marker are an error: the content was not
// written by JoinPhases.
func SplitPhases(content []byte) ([]Section, error) {
	docs := SplitDocuments(content)
	var out []Section
	var cur *Section
	var before bytes.Buffer
	for _, d := range docs {
		if p, ok := marker(d); ok {
			if !knownPhase(p) {
				return nil, fmt.Errorf("the content names an unknown phase %q", p)
			}
			if cur != nil && phaseIndex(p) <= phaseIndex(cur.Phase) {
				return nil, fmt.Errorf("the content has phase %q after phase %q", p, cur.Phase)
			}
			out = append(out, Section{Phase: p})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			before.WriteString(d)
			continue
		}
		cur.YAML = append(cur.YAML, d...)
	}
	if len(out) == 0 {
		return []Section{{Phase: PhaseMain, YAML: content}}, nil
	}
	if len(bytes.TrimSpace(stripComments(before.Bytes()))) > 0 {
		return nil, fmt.Errorf("the content has documents before its first phase marker")
	}
	return out, nil
}

func phaseIndex(p Phase) int {
	for i, k := range Phases {
		if k == p {
			return i
		}
	}
	return -1
}

// SplitDocuments cuts YAML at its document separators ("---" lines), each
// piece keeping its separator line and its comments.
func SplitDocuments(content []byte) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.SplitAfterSeq(string(content), "\n") {
		if isSeparator(line) && cur.Len() > 0 {
			docs = append(docs, cur.String())
			cur.Reset()
		}
		cur.WriteString(line)
	}
	if cur.Len() > 0 {
		docs = append(docs, cur.String())
	}
	return docs
}

func isSeparator(line string) bool {
	l := strings.TrimRight(line, "\r\n")
	return l == "---" || strings.HasPrefix(l, "--- ")
}

// marker reads a document that is exactly a phase marker.
func marker(doc string) (Phase, bool) {
	var lines []string
	for l := range strings.SplitSeq(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "---" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], PhaseMarker) {
		return "", false
	}
	return Phase(strings.TrimSpace(strings.TrimPrefix(lines[0], PhaseMarker))), true
}

func stripComments(b []byte) []byte {
	var out bytes.Buffer
	for l := range strings.SplitSeq(string(b), "\n") {
		if t := strings.TrimSpace(l); t == "" || t == "---" || strings.HasPrefix(t, "#") {
			continue
		}
		out.WriteString(l + "\n")
	}
	return out.Bytes()
}

// AppendToMain adds docs (multi-document YAML) to the main phase of
// content: at the end of content without phases, or at the end of its main
// section (made, in its place, when the content has none).
func AppendToMain(content, docs []byte) ([]byte, error) {
	sections, err := SplitPhases(content)
	if err != nil {
		return nil, err
	}
	if len(sections) == 1 && sections[0].Phase == PhaseMain && !bytes.Contains(content, []byte(PhaseMarker)) {
		out := bytes.TrimRight(content, "\n")
		if len(out) > 0 {
			out = append(out, '\n')
		}
		return append(out, docs...), nil
	}
	i := 0
	for i < len(sections) && phaseIndex(sections[i].Phase) < phaseIndex(PhaseMain) {
		i++
	}
	if i == len(sections) || sections[i].Phase != PhaseMain {
		sections = append(sections[:i], append([]Section{{Phase: PhaseMain}}, sections[i:]...)...)
	}
	y := bytes.TrimRight(sections[i].YAML, "\n")
	if len(y) > 0 {
		y = append(y, '\n')
	}
	sections[i].YAML = append(y, docs...)
	return JoinPhases(sections), nil
}
