package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/metrics"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/renderservice"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer"
)

// BundleRenderer renders a Bundle's resources with options already merged
// with a target's. The controller's is a renderservice.Client (the
// renderer, apart from the controller's pod) or a renderworker.Pool (child
// processes in its pod): the authors' content never renders in the
// controller process. A *renderworker.RenderError is the Bundle's failure;
// any other error is the controller's own trouble, retried.
type BundleRenderer interface {
	// values are the target cluster's inputs of the Helm values (nil:
	// none), rendered in the worker with the rest of the Bundle.
	RenderFor(ctx context.Context, name string, resources []fleet.BundleResource, opts fleet.BundleDeploymentOptions, values *renderer.ClusterValues) (*renderer.Output, error)
	// Limits are the limits renders run under now.
	Limits() renderworker.Limits
}

// renderCache remembers, per Bundle, what rendering its current resources
// gave for each set of options: the manifest ID, or the failure. Rendering
// is a function of the Bundle's name, resources and options (and of the
// limits, for failures), and a render costs a process, so reconciles caused
// by status changes render nothing, and a Bundle that runs into a limit
// does so once per change, not once per reconcile. The manifests themselves
// are not kept: they are rendered again only when a content Secret needs
// writing.
type renderCache struct {
	mu       sync.Mutex
	byBundle map[types.NamespacedName]*bundleRenders
}

type bundleRenders struct {
	inputs    string // hash of the name, the resources and the limits
	byOptions map[string]renderOutcome
}

type renderOutcome struct {
	contentID string
	keys      []fleet.ResourceKey
	err       *renderworker.RenderError
}

func (c *renderCache) lookup(key types.NamespacedName, inputs, options string) (renderOutcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	br := c.byBundle[key]
	if br == nil || br.inputs != inputs {
		return renderOutcome{}, false
	}
	o, ok := br.byOptions[options]
	return o, ok
}

func (c *renderCache) store(key types.NamespacedName, inputs, options string, o renderOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byBundle == nil {
		c.byBundle = map[types.NamespacedName]*bundleRenders{}
	}
	br := c.byBundle[key]
	if br == nil || br.inputs != inputs {
		br = &bundleRenders{inputs: inputs, byOptions: map[string]renderOutcome{}}
		c.byBundle[key] = br
	}
	br.byOptions[options] = o
}

func (c *renderCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byBundle, key)
}

// render is one set of options of a Bundle during one reconcile.
type render struct {
	opts fleet.BundleDeploymentOptions
	// values are the cluster's inputs of the Helm values (nil: none).
	values *renderer.ClusterValues
	// optsHash is the render's key: the options' hash and the values
	// inputs' hash.
	optsHash  string
	contentID string
	// rendered says whether this reconcile rendered it, and so has its
	// manifests (empty for a Bundle that renders to nothing).
	rendered  bool
	manifests []byte
	// keys name the rendered resources (status.resourceKey).
	keys []fleet.ResourceKey
	// err is the failure the Bundle's author has to fix.
	err *renderworker.RenderError
}

// reconcileRenders renders one Bundle during one reconcile: at most once per
// distinct set of options, and not at all when the cache knows the result.
type reconcileRenders struct {
	// mu guards the renders while BundleDeployments are written in
	// parallel (get runs before that, from one goroutine).
	mu       sync.Mutex
	renderer BundleRenderer
	cache    *renderCache
	bundle   *fleet.Bundle
	key      types.NamespacedName
	inputs   string
	byHash   map[string]*render
	ordered  []*render
	// resources loads the Bundle's resources (from its contents for a
	// Bundle with spec.contentsId) the first time a render needs them.
	resources func(context.Context) ([]fleet.BundleResource, error)
	loaded    []fleet.BundleResource
	hasLoaded bool
}

func newReconcileRenders(r BundleRenderer, cache *renderCache, b *fleet.Bundle, resources func(context.Context) ([]fleet.BundleResource, error)) *reconcileRenders {
	h := sha256.New()
	// The contentsId is the sha256 of the resources' JSON: the same sum as
	// inline resources, so the cache key includes it without a read.
	fmt.Fprintf(h, "%s\n%s\n%+v", b.Name, bundleResourcesHash(b), r.Limits())
	return &reconcileRenders{
		renderer: r, cache: cache, bundle: b,
		key:       types.NamespacedName{Namespace: b.Namespace, Name: b.Name},
		inputs:    hex.EncodeToString(h.Sum(nil)),
		byHash:    map[string]*render{},
		resources: resources,
	}
}

// getWith returns the render of the Bundle with opts (whose hash is
// optsHash) and values. An error is the
// controller's own trouble (a worker that could not start); the Bundle's
// failures are in the render.
func (rr *reconcileRenders) getWith(ctx context.Context, opts fleet.BundleDeploymentOptions, optsHash string, values *renderer.ClusterValues) (*render, error) {
	h := optsHash
	if values != nil {
		h += "/" + valuesHash(values)
	}
	if rd, ok := rr.byHash[h]; ok {
		return rd, nil
	}
	rd := &render{opts: opts, values: values, optsHash: h}
	if o, ok := rr.cache.lookup(rr.key, rr.inputs, h); ok {
		rd.contentID, rd.keys, rd.err = o.contentID, o.keys, o.err
	} else if err := rr.run(ctx, rd); err != nil {
		return nil, err
	}
	rr.byHash[h] = rd
	rr.ordered = append(rr.ordered, rd)
	return rd, nil
}

// ensureManifests renders rd now if this reconcile has not yet. A Bundle
// whose templates are not deterministic (random names, timestamps) gets a
// new manifest ID here; its clusters all move to it.
func (rr *reconcileRenders) ensureManifests(ctx context.Context, rd *render) error {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rd.rendered || rd.err != nil {
		return nil
	}
	return rr.run(ctx, rd)
}

// outcome returns what rd rendered to so far: its manifest ID, its
// manifests (when this reconcile rendered it) and its failure.
func (rr *reconcileRenders) outcome(rd *render) (contentID string, manifests []byte, err *renderworker.RenderError) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rd.contentID, rd.manifests, rd.err
}

func (rr *reconcileRenders) run(ctx context.Context, rd *render) error {
	if !rr.hasLoaded {
		res, err := rr.resources(ctx)
		if err != nil {
			return err
		}
		rr.loaded, rr.hasLoaded = res, true
	}
	start := time.Now()
	out, err := rr.renderer.RenderFor(ctx, rr.bundle.Name, rr.loaded, rd.opts, rd.values)
	rd.rendered = err == nil || errors.As(err, new(*renderworker.RenderError))
	metrics.BundleRenderDuration.Observe(time.Since(start).Seconds())
	var re *renderworker.RenderError
	switch {
	case errors.As(err, &re):
		metrics.BundleRenders.WithLabelValues(re.Reason).Inc()
		rd.err, rd.manifests, rd.contentID = re, nil, ""
	case err != nil:
		metrics.BundleRenders.WithLabelValues("error").Inc()
		err = fmt.Errorf("rendering bundle %s: %w", rr.key, err)
		if errors.As(err, new(*renderservice.UnavailableError)) {
			return reconciler.Retry(fleet.RendererUnavailableReason, err)
		}
		return err
	default:
		metrics.BundleRenders.WithLabelValues("success").Inc()
		rd.err, rd.manifests, rd.contentID = nil, out.YAML, bundlecontent.ManifestID(out.YAML)
		rd.keys = resourceKeys(out.YAML, rd.opts)
	}
	rr.cache.store(rr.key, rr.inputs, rd.optsHash, renderOutcome{contentID: rd.contentID, keys: rd.keys, err: rd.err})
	return nil
}
