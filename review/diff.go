package review

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/remote/restconfig"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// Change is what happens to one object.
type Change string

const (
	Unchanged Change = "unchanged"
	Added     Change = "added"
	Removed   Change = "removed"
	Changed   Change = "changed"
)

// Flows of registration.
const (
	ManagerInitiated = "manager-initiated"
	AgentInitiated   = "agent-initiated"
)

// ClusterReport is what a change does to one Cluster.
type ClusterReport struct {
	// Key is "<workspace>/<name>".
	Key  string
	Flow string
	// Change of the Cluster object itself (its agent or its targeting may
	// change while it is Unchanged: a configuration or Bundle change).
	Change Change
	// Redeploy: the controller deploys the agent again (manager-initiated:
	// pushed to the cluster again; agent-initiated: its agent Bundle
	// changes). Rolls: the agent's pod template changes, so its pod is
	// replaced. Why says what caused either.
	Redeploy bool
	Rolls    bool
	Why      []string
	// ManifestDiff is a unified diff of the agent's rendered manifests
	// (Secrets' values masked); empty when they are the same.
	ManifestDiff string
	// BundlesAdded and BundlesRemoved are the Bundles that start and stop
	// deploying to the cluster; BundlesRetargeted those that keep deploying
	// under another of their targets (other options), as
	// "<bundle> (<old target> → <new target>)".
	BundlesAdded, BundlesRemoved, BundlesRetargeted []string
	// Live is what a server-side dry run of the head agent's objects says
	// each would do on the cluster (Live), or why it could not run.
	Live      []string
	LiveError string
	// BundlesLive is, with --live, what each Bundle the change deploys anew
	// to the cluster would change there (LiveBundles).
	BundlesLive []BundleLive

	// objects are the head agent's rendered objects (unmasked: only for
	// the dry run, never shown).
	objects []*unstructured.Unstructured
	// cluster is the head side's Cluster, liveBundles the head Bundles the
	// change deploys anew to it (for LiveBundles).
	cluster     *fleet.Cluster
	liveBundles []*fleet.Bundle
}

// shown reports whether a report prints the cluster: something happens to
// it, or the live dry run of its Bundles has something to say.
func (c *ClusterReport) shown() bool { return c.Touched() || len(c.BundlesLive) > 0 }

// Touched reports whether anything happens to the cluster.
func (c *ClusterReport) Touched() bool {
	return c.Change != Unchanged || c.Redeploy || c.Rolls || c.ManifestDiff != "" || len(c.BundlesAdded)+len(c.BundlesRemoved)+len(c.BundlesRetargeted) > 0
}

// TokenReport is what a change does to one ClusterRegistrationToken's values
// file (what `helm install fleet-agent` installs with).
type TokenReport struct {
	Key        string
	Change     Change
	ValuesDiff string
}

// Report is the whole review.
type Report struct {
	Base, Head string
	Clusters   []ClusterReport
	Tokens     []TokenReport
	// Notes are things a reviewer should know (a configuration found on one
	// side only, say).
	Notes []string
}

// Summary counts.
func (r *Report) Summary() (clustersChanged, agentsRolled, bundleMoves int) {
	for _, c := range r.Clusters {
		if c.Touched() {
			clustersChanged++
		}
		if c.Rolls {
			agentsRolled++
		}
		bundleMoves += len(c.BundlesAdded) + len(c.BundlesRemoved) + len(c.BundlesRetargeted)
	}
	return
}

// Changed reports whether the change does anything at all.
func (r *Report) Changed() bool {
	n, _, _ := r.Summary()
	for _, t := range r.Tokens {
		if t.Change != Unchanged {
			n++
		}
	}
	return n > 0
}

// Diff compares base and head.
func Diff(base, head *Tree) (*Report, error) {
	r := &Report{Base: base.Source, Head: head.Source}
	if base.ConfigFrom != head.ConfigFrom {
		r.Notes = append(r.Notes, fmt.Sprintf("the controller configuration comes from %s on the base side and from %s on the head side", base.ConfigFrom, head.ConfigFrom))
	}
	agent, err := renderer.NewAgentRenderer()
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for k := range base.Clusters {
		keys[k] = true
	}
	for k := range head.Clusters {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		c, err := diffCluster(agent, base, head, k)
		if err != nil {
			return nil, err
		}
		r.Clusters = append(r.Clusters, *c)
		if note := encryptedNote(base, head, k); note != "" {
			r.Notes = append(r.Notes, note)
		}
	}
	tokens := map[string]bool{}
	for k := range base.Tokens {
		tokens[k] = true
	}
	for k := range head.Tokens {
		tokens[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(tokens)) {
		t, err := diffToken(base, head, k)
		if err != nil {
			return nil, err
		}
		r.Tokens = append(r.Tokens, *t)
	}
	return r, nil
}

// side is one Cluster rendered on one side.
type side struct {
	cluster   *fleet.Cluster
	values    *agentvalues.Values
	hash      string
	manifests string
	template  any // the agent Deployment's pod template
	objects   []*unstructured.Unstructured
	server    string
	bundles   []string
	// targets names, per Bundle, the target that selects the cluster.
	targets map[string]string
}

func render(agent *renderer.AgentRenderer, t *Tree, key string, withBootstrap bool) (*side, error) {
	c, ok := t.Clusters[key]
	if !ok {
		return nil, nil
	}
	s := &side{cluster: c, targets: map[string]string{}}
	v, err := agentvalues.Offline(c, t.Config, withBootstrap)
	if err != nil {
		return nil, fmt.Errorf("%s: Cluster %s: %w", t.Source, key, err)
	}
	s.values = v
	if s.hash, err = agent.Hash(v); err != nil {
		return nil, err
	}
	out, err := agent.Render(v)
	if err != nil {
		return nil, fmt.Errorf("%s: Cluster %s: rendering its agent: %w", t.Source, key, err)
	}
	objs, err := out.Objects()
	if err != nil {
		return nil, err
	}
	s.objects = objs
	var docs []string
	for _, o := range objs {
		o = o.DeepCopy()
		mask(o)
		if o.GetKind() == "Deployment" && o.GetName() == "fleet-agent" {
			s.template, _, _ = unstructured.NestedFieldCopy(o.Object, "spec", "template")
		}
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		docs = append(docs, fmt.Sprintf("# %s %s/%s\n%s", o.GetKind(), o.GetNamespace(), o.GetName(), y))
	}
	s.manifests = strings.Join(docs, "---\n")
	if c.Spec.KubeConfigSecret != "" {
		s.server = serverOf(t, c)
	}
	ws := c.Namespace
	for _, bk := range slices.Sorted(maps.Keys(t.Bundles)) {
		b := t.Bundles[bk]
		if b.Namespace != ws {
			continue
		}
		target, err := targeting.Match(b, c, targeting.Groups{Items: t.Groups[ws]})
		if err != nil {
			return nil, fmt.Errorf("%s: Bundle %s: %w", t.Source, bk, err)
		}
		if target != nil && !target.DoNotDeploy {
			s.bundles = append(s.bundles, b.Name)
			s.targets[b.Name] = target.Name
		}
	}
	return s, nil
}

// kubeconfigSecret is the key of a manager-initiated Cluster's kubeconfig
// Secret.
func kubeconfigSecret(c *fleet.Cluster) string {
	ns := c.Spec.KubeConfigSecretNamespace
	if ns == "" {
		ns = c.Namespace
	}
	return ns + "/" + c.Spec.KubeConfigSecret
}

// serverOf identifies the server a manager-initiated Cluster's kubeconfig
// Secret points at (never its credentials); "" when it cannot be read
// offline (a placeholder), "encrypted" for a SOPS-encrypted Secret,
// "missing" without the Secret.
func serverOf(t *Tree, c *fleet.Cluster) string {
	key := kubeconfigSecret(c)
	s, ok := t.Secrets[key]
	if !ok {
		return "missing"
	}
	if t.Encrypted[key] {
		return "encrypted"
	}
	kc := s.Data["value"]
	if v, ok := s.StringData["value"]; ok {
		kc = []byte(v)
	}
	h, err := restconfig.ServerHash(kc, t.Config.InsecureKubeconfig)
	if err != nil {
		return ""
	}
	return h
}

// encryptedNote warns that the server of Cluster key's kubeconfig Secret is
// not checked because the Secret is encrypted (on either side).
func encryptedNote(base, head *Tree, key string) string {
	for _, t := range []*Tree{head, base} {
		c, ok := t.Clusters[key]
		if !ok || c.Spec.KubeConfigSecret == "" {
			continue
		}
		if secret := kubeconfigSecret(c); t.Encrypted[secret] {
			return fmt.Sprintf("Cluster %s: its kubeconfig Secret %s is encrypted (SOPS): server not checked (a change of the server or CA it names is not shown)", key, secret)
		}
	}
	return ""
}

// mask replaces the values of a Secret by a short hash: a change shows, its
// content does not.
func mask(o *unstructured.Unstructured) {
	if o.GetKind() != "Secret" {
		return
	}
	for _, field := range []string{"data", "stringData"} {
		m, ok, _ := unstructured.NestedMap(o.Object, field)
		if !ok {
			continue
		}
		for k, v := range m {
			sum := sha256.Sum256([]byte(fmt.Sprint(v)))
			m[k] = "<masked sha256:" + hex.EncodeToString(sum[:])[:12] + ">"
		}
		_ = unstructured.SetNestedMap(o.Object, m, field)
	}
}

func flowOf(c *fleet.Cluster) string {
	if c.Spec.KubeConfigSecret != "" {
		return ManagerInitiated
	}
	return AgentInitiated
}

func diffCluster(agent *renderer.AgentRenderer, base, head *Tree, key string) (*ClusterReport, error) {
	bc, hc := base.Clusters[key], head.Clusters[key]
	// An existing Cluster's changes reach it through its agent Bundle (no
	// bootstrap Secret); a new one is deployed the first time with it.
	withBootstrap := bc == nil && hc != nil && hc.Spec.KubeConfigSecret != ""
	b, err := render(agent, base, key, false)
	if err != nil {
		return nil, err
	}
	h, err := render(agent, head, key, withBootstrap)
	if err != nil {
		return nil, err
	}
	r := &ClusterReport{Key: key}
	switch {
	case b == nil:
		r.Change, r.Flow = Added, flowOf(hc)
		r.Redeploy, r.Rolls = true, true
		r.Why = append(r.Why, "new Cluster: its agent is deployed")
		r.ManifestDiff = unified(key, "", h.manifests)
		r.BundlesAdded = h.bundles
		return r, nil
	case h == nil:
		r.Change, r.Flow = Removed, flowOf(bc)
		r.Why = append(r.Why, "Cluster removed: the controller removes its agent and what its Bundles deployed")
		r.ManifestDiff = unified(key, b.manifests, "")
		r.BundlesRemoved = b.bundles
		return r, nil
	}
	r.Flow = flowOf(hc)
	r.Change = Unchanged
	if !equality.Semantic.DeepEqual(bc.Spec, hc.Spec) || !equality.Semantic.DeepEqual(bc.Labels, hc.Labels) {
		r.Change = Changed
	}
	if b.hash != h.hash {
		r.Redeploy = true
		r.Why = append(r.Why, valueChanges(b.values, h.values)...)
	}
	// An encrypted kubeconfig on either side is not compared: the note of
	// encryptedNote says its server is not checked.
	if b.server != h.server && b.server != "encrypted" && h.server != "encrypted" && hc.Spec.KubeConfigSecret != "" {
		r.Redeploy = true
		r.Why = append(r.Why, "the kubeconfig Secret points at another server or CA: the agent is pushed there")
	}
	r.Rolls = !equality.Semantic.DeepEqual(b.template, h.template)
	r.objects = h.objects
	r.cluster, r.liveBundles = hc, liveBundles(base, head, b, h, r.Change == Changed)
	r.ManifestDiff = unified(key, b.manifests, h.manifests)
	r.BundlesAdded, r.BundlesRemoved = minus(h.bundles, b.bundles), minus(b.bundles, h.bundles)
	for _, name := range h.bundles {
		if old, ok := b.targets[name]; ok && old != h.targets[name] {
			r.BundlesRetargeted = append(r.BundlesRetargeted, fmt.Sprintf("%s (target %s → %s)", name, targetName(old), targetName(h.targets[name])))
		}
	}
	return r, nil
}

// valueChanges names the agent values that differ (never their content
// for the token).
func valueChanges(b, h *agentvalues.Values) []string {
	var bm, hm map[string]any
	bj, _ := json.Marshal(b)
	hj, _ := json.Marshal(h)
	_ = json.Unmarshal(bj, &bm)
	_ = json.Unmarshal(hj, &hm)
	var out []string
	keys := map[string]bool{}
	for k := range bm {
		keys[k] = true
	}
	for k := range hm {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if equality.Semantic.DeepEqual(bm[k], hm[k]) {
			continue
		}
		switch k {
		case "generation":
			out = append(out, fmt.Sprintf("redeployAgentGeneration %v → %v", bm[k], hm[k]))
		case "token":
			out = append(out, "the import token")
		default:
			out = append(out, "agent setting "+k+" changed")
		}
	}
	return out
}

func targetName(n string) string {
	if n == "" {
		return "(unnamed)"
	}
	return n
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// unified is a unified diff of two manifest sets; "" when equal.
func unified(key, a, b string) string {
	if a == b {
		return ""
	}
	d := difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b),
		FromFile: "base/" + key, ToFile: "head/" + key, Context: 3,
	}
	s, err := difflib.GetUnifiedDiffString(d)
	if err != nil {
		return fmt.Sprintf("(no diff: %v)", err)
	}
	return s
}

func diffToken(base, head *Tree, key string) (*TokenReport, error) {
	values := func(t *Tree) (string, error) {
		tok, ok := t.Tokens[key]
		if !ok {
			return "", nil
		}
		v, err := agentvalues.ForToken(tok, t.Config, agentvalues.TokenPlaceholder)
		if err != nil {
			return "", fmt.Errorf("%s: ClusterRegistrationToken %s: %w", t.Source, key, err)
		}
		y, err := v.YAML()
		return string(y), err
	}
	b, err := values(base)
	if err != nil {
		return nil, err
	}
	h, err := values(head)
	if err != nil {
		return nil, err
	}
	r := &TokenReport{Key: key, Change: Unchanged}
	_, inBase := base.Tokens[key]
	_, inHead := head.Tokens[key]
	switch {
	case !inBase:
		r.Change = Added
	case !inHead:
		r.Change = Removed
	case b != h || !equality.Semantic.DeepEqual(base.Tokens[key].Spec, head.Tokens[key].Spec):
		r.Change = Changed
	}
	r.ValuesDiff = unified("token/"+key, b, h)
	return r, nil
}
