package review

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// agentLine says in words what happens to the cluster's agent.
func (c *ClusterReport) agentLine() string {
	switch {
	case c.Change == Added:
		return "deployed (new Cluster)"
	case c.Change == Removed:
		return "removed"
	}
	var parts []string
	if c.Redeploy {
		if c.Flow == ManagerInitiated {
			parts = append(parts, "pushed again")
		} else {
			parts = append(parts, "agent Bundle updated")
		}
	}
	if c.Rolls {
		parts = append(parts, "rolls (new pod)")
	} else if c.Redeploy {
		parts = append(parts, "pod kept")
	}
	if len(parts) == 0 {
		return "unchanged"
	}
	return strings.Join(parts, ", ")
}

func (c *ClusterReport) bundlesLine() string {
	var parts []string
	for _, b := range c.BundlesAdded {
		parts = append(parts, "+"+b)
	}
	for _, b := range c.BundlesRemoved {
		parts = append(parts, "-"+b)
	}
	for _, b := range c.BundlesRetargeted {
		parts = append(parts, "~"+b)
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, " ")
}

// Text writes the report for a terminal.
func (r *Report) Text(w io.Writer) error {
	changed, rolled, moves := r.Summary()
	var b strings.Builder
	fmt.Fprintf(&b, "fleet diff %s → %s\n", r.Base, r.Head)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, c := range r.Clusters {
		if !c.shown() {
			continue
		}
		fmt.Fprintf(&b, "\nCluster %s (%s, %s)\n", c.Key, c.Flow, c.Change)
		fmt.Fprintf(&b, "  agent:   %s\n", c.agentLine())
		for _, why := range c.Why {
			fmt.Fprintf(&b, "           %s\n", why)
		}
		fmt.Fprintf(&b, "  Bundles: %s\n", c.bundlesLine())
		if c.LiveError != "" {
			fmt.Fprintf(&b, "  live:    could not ask the cluster: %s\n", c.LiveError)
		}
		for _, l := range c.Live {
			fmt.Fprintf(&b, "  live:    %s\n", l)
		}
		for _, bl := range c.BundlesLive {
			for _, l := range bl.lines() {
				fmt.Fprintf(&b, "  live:    Bundle %s: %s\n", bl.Bundle, l)
			}
		}
		if c.ManifestDiff != "" {
			b.WriteString(indent(c.ManifestDiff, "  "))
		}
	}
	for _, t := range r.Tokens {
		if t.Change == Unchanged {
			continue
		}
		fmt.Fprintf(&b, "\nClusterRegistrationToken %s (%s): its values file for helm install fleet-agent\n", t.Key, t.Change)
		if t.ValuesDiff != "" {
			b.WriteString(indent(t.ValuesDiff, "  "))
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTERS CHANGED\tAGENTS ROLLED\tBUNDLES MOVED")
	fmt.Fprintf(tw, "%d\t%d\t%d\n", changed, rolled, moves)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Markdown writes the report as a pull-request comment.
func (r *Report) Markdown(w io.Writer) error {
	changed, rolled, moves := r.Summary()
	var b strings.Builder
	fmt.Fprintf(&b, "### fleet diff: %d cluster(s) changed, %d agent(s) rolled, %d Bundle move(s)\n\n", changed, rolled, moves)
	fmt.Fprintf(&b, "`%s` → `%s`\n\n", r.Base, r.Head)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "> note: %s\n\n", n)
	}
	if changed > 0 || r.hasBundlesLive() {
		b.WriteString("| Cluster | flow | change | agent | why | Bundles |\n|---|---|---|---|---|---|\n")
		for _, c := range r.Clusters {
			if !c.shown() {
				continue
			}
			live := strings.Join(c.Live, "; ")
			if c.LiveError != "" {
				live = "could not ask the cluster: " + c.LiveError
			}
			if live != "" {
				live = " live: " + live
			}
			bundles := c.bundlesLine()
			for _, bl := range c.BundlesLive {
				bundles += fmt.Sprintf("; live: %s: %s", bl.Bundle, strings.Join(bl.lines(), "; "))
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s%s | %s | %s |\n", c.Key, c.Flow, c.Change, c.agentLine(), live,
				strings.Join(c.Why, "; "), bundles)
		}
		b.WriteString("\n")
		for _, c := range r.Clusters {
			if c.ManifestDiff == "" {
				continue
			}
			fmt.Fprintf(&b, "<details><summary><code>%s</code>: agent manifests</summary>\n\n```diff\n%s```\n\n</details>\n\n", c.Key, c.ManifestDiff)
		}
	}
	for _, t := range r.Tokens {
		if t.Change == Unchanged {
			continue
		}
		fmt.Fprintf(&b, "<details><summary>ClusterRegistrationToken <code>%s</code> (%s): values file</summary>\n\n```diff\n%s```\n\n</details>\n\n", t.Key, t.Change, t.ValuesDiff)
	}
	if !r.Changed() {
		b.WriteString("No cluster's agent or Bundles change.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		b.WriteString(prefix + l)
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// reportJSON is the report for programs (fleet diff -o json): what Text
// shows, as fields.
type reportJSON struct {
	Base    string      `json:"base"`
	Head    string      `json:"head"`
	Changed bool        `json:"changed"`
	Summary summaryJSON `json:"summary"`
	Notes   []string    `json:"notes"`
	// Clusters and Tokens are those the change touches.
	Clusters []clusterJSON `json:"clusters"`
	Tokens   []tokenJSON   `json:"tokens"`
}

type summaryJSON struct {
	ClustersChanged int `json:"clustersChanged"`
	AgentsRolled    int `json:"agentsRolled"`
	BundlesMoved    int `json:"bundlesMoved"`
}

type clusterJSON struct {
	Cluster string `json:"cluster"`
	Flow    string `json:"flow"`
	Change  Change `json:"change"`
	// Agent is the text's agent line ("pushed again, rolls (new pod)").
	Agent             string   `json:"agent"`
	Redeploy          bool     `json:"redeploy"`
	Rolls             bool     `json:"rolls"`
	Why               []string `json:"why"`
	BundlesAdded      []string `json:"bundlesAdded"`
	BundlesRemoved    []string `json:"bundlesRemoved"`
	BundlesRetargeted []string `json:"bundlesRetargeted"`
	Live              []string `json:"live,omitempty"`
	LiveError         string   `json:"liveError,omitempty"`
	// BundlesLive: with --live, each Bundle the change deploys anew to the
	// cluster and what it would change there.
	BundlesLive  []BundleLive `json:"bundlesLive,omitempty"`
	ManifestDiff string       `json:"manifestDiff"`
}

type tokenJSON struct {
	Token      string `json:"token"`
	Change     Change `json:"change"`
	ValuesDiff string `json:"valuesDiff"`
}

// JSON writes the report as one JSON document. Lists are never null.
func (r *Report) JSON(w io.Writer) error {
	changed, rolled, moves := r.Summary()
	doc := reportJSON{
		Base: r.Base, Head: r.Head, Changed: r.Changed(),
		Summary: summaryJSON{ClustersChanged: changed, AgentsRolled: rolled, BundlesMoved: moves},
		Notes:   nonNil(r.Notes), Clusters: []clusterJSON{}, Tokens: []tokenJSON{},
	}
	for _, c := range r.Clusters {
		if !c.shown() {
			continue
		}
		doc.Clusters = append(doc.Clusters, clusterJSON{
			Cluster: c.Key, Flow: c.Flow, Change: c.Change, Agent: c.agentLine(), Redeploy: c.Redeploy, Rolls: c.Rolls,
			Why: nonNil(c.Why), BundlesAdded: nonNil(c.BundlesAdded), BundlesRemoved: nonNil(c.BundlesRemoved),
			BundlesRetargeted: nonNil(c.BundlesRetargeted), Live: c.Live, LiveError: c.LiveError, BundlesLive: c.BundlesLive, ManifestDiff: c.ManifestDiff,
		})
	}
	for _, t := range r.Tokens {
		if t.Change != Unchanged {
			doc.Tokens = append(doc.Tokens, tokenJSON{Token: t.Key, Change: t.Change, ValuesDiff: t.ValuesDiff})
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// lines is what the report says of one Bundle's live dry run.
func (bl BundleLive) lines() []string {
	if bl.Error != "" {
		return []string{"could not ask the cluster: " + bl.Error}
	}
	return bl.Lines
}

func (r *Report) hasBundlesLive() bool {
	for _, c := range r.Clusters {
		if len(c.BundlesLive) > 0 {
			return true
		}
	}
	return false
}
