package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// RevisionAnnotation on an agent Bundle names the revision it was rendered
// at (Revision).
const RevisionAnnotation = "fleet.cattle.io/agent-revision"

// WaitingForWaveReason (Cluster condition reason): the Cluster's agent
// waits for its wave of a staged rollout.
const WaitingForWaveReason = "WaitingForRolloutWave"

// Revision identifies what every agent is rendered from: the agent chart
// and the configuration's agent settings, as they come out for a Cluster
// with no agent settings of its own. A Cluster's own settings are not
// part of it: changing them rolls that Cluster alone, at once.
func Revision(r *renderer.AgentRenderer, cfg *config.Config) (string, error) {
	ref := &fleet.Cluster{}
	ref.Namespace, ref.Name = "fleet-default", "revision"
	v, err := agentvalues.ForCluster(ref, cfg, nil)
	if err != nil {
		return "", fmt.Errorf("computing the agent revision: %w", err)
	}
	return r.Hash(v)
}

// Name is the AgentRollout of a revision.
func Name(revision string) string { return "agent-" + short(revision) }

// Source is what a Cluster's agent is rendered from.
type Source struct {
	// Revision is the revision the agent is rendered at.
	Revision string
	// Renderer and Config render it; nil means the controller's own chart
	// and current configuration.
	Renderer *renderer.AgentRenderer
	Config   *config.Config
	// Hold: leave the agent as it is (Message says why).
	Hold    bool
	Message string
}

// Gate decides, for the Cluster reconciler, what each Cluster's agent is
// rendered from while a rollout runs. It reads AgentRollouts from the
// informer cache and keeps the previous revisions' charts parsed.
type Gate struct {
	Reader client.Reader

	mu        sync.Mutex
	revisions map[string]*kept
	indexes   map[string]*planIndex
}

// kept is an earlier revision, ready to render from.
type kept struct {
	renderer *renderer.AgentRenderer
	config   *config.Config
}

// planIndex is a rollout's plan by Cluster, for one resourceVersion.
type planIndex struct {
	resourceVersion string
	wave            map[string]int
	rolledBack      map[string]bool
}

// Decide returns what the agent of Cluster key ("namespace/name") is
// rendered from. revision is the current revision; bundleRevision is the
// revision of the agent Bundle the Cluster has (hasBundle false: none yet).
func (g *Gate) Decide(ctx context.Context, cfg *config.Config, key, revision string, hasBundle bool, bundleRevision string) (Source, error) {
	current := Source{Revision: revision}
	if cfg.AgentRollout == nil || !hasBundle {
		// Not staged, or a new Cluster: there is no older agent to keep.
		return current, nil
	}
	ro := &fleet.AgentRollout{}
	err := g.Reader.Get(ctx, client.ObjectKey{Name: Name(revision)}, ro)
	if err != nil && !apierrors.IsNotFound(err) {
		return Source{}, fmt.Errorf("reading AgentRollout %s: %w", Name(revision), err)
	}
	if err != nil || !ro.Status.Current || ro.Spec.Revision != revision {
		// No plan for this revision yet (or only an old one, of when it
		// was current before): wait for it.
		if bundleRevision == revision {
			return current, nil
		}
		return Source{Hold: true, Message: fmt.Sprintf("the agent waits for the rollout of revision %s to be planned (AgentRollout %s)", short(revision), Name(revision))}, nil
	}
	if ro.Status.Phase == fleet.RolloutComplete {
		return current, nil
	}
	idx := g.index(ro)
	if idx.rolledBack[key] {
		prev, err := g.previous(ctx, ro.Spec.PreviousRevision)
		if err != nil {
			return Source{}, err
		}
		if prev == nil {
			return Source{Hold: true, Message: fmt.Sprintf("AgentRollout %s put this cluster back, but no record of revision %s is left to render it from", ro.Name, short(ro.Spec.PreviousRevision))}, nil
		}
		return Source{Revision: ro.Spec.PreviousRevision, Renderer: prev.renderer, Config: prev.config}, nil
	}
	wave, planned := idx.wave[key]
	switch {
	case !planned && bundleRevision == revision:
		return current, nil
	case !planned:
		return Source{Hold: true, Message: fmt.Sprintf("the agent waits to join the plan of AgentRollout %s", ro.Name)}, nil
	case ro.Spec.Aborted || ro.Status.Phase == fleet.RolloutAborted:
		// Aborted before this Cluster's wave: it keeps what it has.
		return Source{Hold: true, Message: fmt.Sprintf("AgentRollout %s was aborted before this cluster's wave", ro.Name)}, nil
	case wave <= int(ro.Status.Wave):
		return current, nil
	}
	return Source{Hold: true, Message: fmt.Sprintf("the agent waits for wave %d/%d of AgentRollout %s (%s)", wave+1, len(ro.Status.Waves), ro.Name, ro.Status.Message)}, nil
}

func (g *Gate) index(ro *fleet.AgentRollout) *planIndex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if idx := g.indexes[ro.Name]; idx != nil && idx.resourceVersion == ro.ResourceVersion {
		return idx
	}
	idx := &planIndex{resourceVersion: ro.ResourceVersion, wave: map[string]int{}, rolledBack: map[string]bool{}}
	for i, w := range ro.Status.Waves {
		for _, k := range w.Clusters {
			idx.wave[k] = i
		}
	}
	for _, k := range ro.Status.RolledBack {
		idx.rolledBack[k] = true
	}
	if g.indexes == nil {
		g.indexes = map[string]*planIndex{}
	}
	// One rollout is current at a time: drop the others.
	for name := range g.indexes {
		if name != ro.Name {
			delete(g.indexes, name)
		}
	}
	g.indexes[ro.Name] = idx
	return idx
}

// previous loads an earlier revision from its AgentRollout; nil when there
// is no record of it.
func (g *Gate) previous(ctx context.Context, revision string) (*kept, error) {
	if revision == "" {
		return nil, nil
	}
	g.mu.Lock()
	k := g.revisions[revision]
	g.mu.Unlock()
	if k != nil {
		return k, nil
	}
	ro := &fleet.AgentRollout{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Name: Name(revision)}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading AgentRollout %s: %w", Name(revision), err)
	}
	k, err := load(ro)
	if err != nil || k == nil {
		return nil, err
	}
	g.mu.Lock()
	if g.revisions == nil {
		g.revisions = map[string]*kept{}
	}
	g.revisions[revision] = k
	g.mu.Unlock()
	return k, nil
}

// load parses the chart and configuration an AgentRollout keeps; nil when
// it keeps none.
func load(ro *fleet.AgentRollout) (*kept, error) {
	if len(ro.Spec.Chart) == 0 || ro.Spec.Config == "" {
		return nil, nil
	}
	r, err := renderer.NewAgentRendererArchive(ro.Spec.Chart)
	if err != nil {
		return nil, fmt.Errorf("AgentRollout %s: %w", ro.Name, err)
	}
	cfg := &config.Config{}
	if err := json.Unmarshal([]byte(ro.Spec.Config), cfg); err != nil {
		return nil, fmt.Errorf("AgentRollout %s: reading spec.config: %w", ro.Name, err)
	}
	return &kept{renderer: r, config: cfg}, nil
}
