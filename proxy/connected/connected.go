// Package connected reports, on each Cluster, whether its agent's tunnel is
// up (docs/design/cluster-access.md, "As built: status of cluster access"): the
// condition Connected, written by fleet-proxy alone by server-side apply of
// that one condition under field manager "fleet-proxy", and the events
// TunnelConnected and TunnelDisconnected.
//
// Several fleet-proxy replicas run and an agent's tunnel may land on any.
// The replica that holds a tunnel writes Connected=True naming itself in
// the message; only when no replica holds it (Tunnels.Held) does a replica write
// False, after a grace so a reconnect does not flap the condition, and only
// over a True that names itself or a replica that no longer runs: it never
// overwrites another live replica's True. Every write is made against the
// resourceVersion it decided on, so two replicas' writes cannot cross.
package connected

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// FieldManager owns the Connected condition.
const FieldManager = "fleet-proxy"

// Event reasons.
const (
	ConnectedEvent    = "TunnelConnected"
	DisconnectedEvent = "TunnelDisconnected"
)

// DefaultGrace is how long no replica may hold a tunnel before Connected
// turns False: an agent that reconnects (a restart, a replica going away)
// is back within it.
const DefaultGrace = 5 * time.Second

// DefaultSweepInterval is how often a replica looks for Clusters whose
// Connected=True names a replica that no longer runs.
const DefaultSweepInterval = time.Minute

// Tunnels is what a Reporter asks the tunnel server (*tunnel.Server is
// one): whether a Cluster's tunnel ("<workspace>/<name>") is held by any
// fleet-proxy replica, this one or a peer, and how many sessions of it
// this replica holds.
type Tunnels interface {
	Held(key string) bool
	Sessions(key string) int
}

// Changes records the tunnel server's session changes for a Reporter: it
// is the tunnel server's tunnel.Observer, made before the tunnel server,
// which the Reporter (made after, with the tunnel server as its Tunnels)
// works off. Each call only queues the key.
type Changes struct {
	grace time.Duration
	now   func() time.Time
	queue workqueue.TypedRateLimitingInterface[string]

	mu   sync.Mutex
	down map[string]time.Time // when the last local session of a key went
}

// NewChanges returns an empty record. A key whose last session on this
// replica ended is looked at grace later (zero: DefaultGrace); now is the
// clock (nil: time.Now).
func NewChanges(grace time.Duration, now func() time.Time) *Changes {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if now == nil {
		now = time.Now
	}
	return &Changes{
		grace: grace, now: now, down: map[string]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "connected"}),
	}
}

// Connected queues the key: a session started.
func (c *Changes) Connected(key string, _ int) {
	c.mu.Lock()
	delete(c.down, key)
	c.mu.Unlock()
	c.queue.Add(key)
}

// Disconnected queues the key after the grace when its last session on
// this replica went.
func (c *Changes) Disconnected(key string, sessions int) {
	if sessions > 0 {
		return
	}
	c.mu.Lock()
	c.down[key] = c.now()
	c.mu.Unlock()
	c.queue.AddAfter(key, c.grace)
}

// Options configure a Reporter.
type Options struct {
	// Changes are the tunnel server's session changes (the tunnel
	// server's Observer).
	Changes *Changes
	// Client reads Clusters from the API server (not a cache: a decision
	// is made on the version it writes against) and applies the status.
	Client client.Client
	// Lister lists the Clusters a sweep looks at (a cache; default Client).
	Lister client.Reader
	// Tunnels tells whether any replica holds a tunnel and how many
	// sessions this one holds (*tunnel.Server).
	Tunnels Tunnels
	// Replica names this replica (its pod name), as the condition's
	// message records it.
	Replica string
	// Running tells whether the replica named runs (this one is asked
	// about only for Trues it wrote before a restart, and is not running
	// then: a process that just started holds nothing it did not see).
	Running func(ctx context.Context, replica string) (bool, error)
	// Recorder records the events as fleet-proxy (nil: none).
	Recorder events.EventRecorder
	// SweepInterval (default DefaultSweepInterval).
	SweepInterval time.Duration
	Log           logr.Logger
}

// Reporter writes the Connected condition and the events for the keys
// Changes queued and those its sweeps find; Run does the writing.
type Reporter struct {
	o     Options
	grace time.Duration
	now   func() time.Time
	queue workqueue.TypedRateLimitingInterface[string]
	c     *Changes
}

// New returns a Reporter.
func New(o Options) (*Reporter, error) {
	if o.Changes == nil || o.Client == nil || o.Tunnels == nil || o.Replica == "" || o.Running == nil {
		return nil, errors.New("connected: Changes, Client, Tunnels, Replica and Running are required")
	}
	if strings.ContainsAny(o.Replica, " \t\n") {
		return nil, fmt.Errorf("connected: replica name %q contains white space", o.Replica)
	}
	if o.Lister == nil {
		o.Lister = o.Client
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return &Reporter{o: o, grace: o.Changes.grace, now: o.Changes.now, queue: o.Changes.queue, c: o.Changes}, nil
}

// Run sweeps at once and every SweepInterval for Trues whose replica is
// gone, and writes the condition for queued keys, until ctx ends.
func (r *Reporter) Run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	go func() {
		t := time.NewTicker(r.o.SweepInterval)
		defer t.Stop()
		for {
			if err := r.sweep(ctx); err != nil && ctx.Err() == nil {
				r.o.Log.Error(err, "looking for Connected conditions of replicas that are gone")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return nil
		}
		err := r.sync(ctx, key)
		switch {
		case err == nil:
			r.queue.Forget(key)
		case ctx.Err() != nil:
		default:
			r.o.Log.Error(err, "writing the Connected condition", "cluster", key)
			r.queue.AddRateLimited(key)
		}
		r.queue.Done(key)
	}
}

// sweep queues for sync to decide again the Clusters whose condition
// disagrees with this replica's sessions: a True while this replica holds
// none (it named this replica's previous process, or a replica that may be
// gone; a True that names a live replica stays its to end, and that
// replica's own sweep ends it once no replica holds the tunnel), or no
// True while this replica holds a session (another replica, not seeing
// this one's sessions, wrote False). A True naming another replica while
// this one holds a session too is left alone: both hold one.
func (r *Reporter) sweep(ctx context.Context) error {
	var list fleet.ClusterList
	if err := r.o.Lister.List(ctx, &list); err != nil {
		return err
	}
	running := map[string]bool{} // per holder, for this sweep
	for _, c := range list.Items {
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ConnectedCondition)
		isTrue := cond != nil && cond.Status == metav1.ConditionTrue
		key := c.Namespace + "/" + c.Name
		if isTrue == (r.o.Tunnels.Sessions(key) > 0) {
			continue
		}
		if isTrue {
			if r.o.Tunnels.Held(key) {
				continue
			}
			if holder := HolderOf(cond); holder != r.o.Replica {
				up, ok := running[holder]
				if !ok {
					var err error
					if up, err = r.o.Running(ctx, holder); err != nil {
						return fmt.Errorf("whether fleet-proxy replica %s runs: %w", holder, err)
					}
					running[holder] = up
				}
				if up {
					continue
				}
			}
		}
		r.queue.Add(key)
	}
	return nil
}

// sync brings the condition of key in line with what this replica knows.
func (r *Reporter) sync(ctx context.Context, key string) error {
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil
	}
	c := &fleet.Cluster{}
	if err := r.o.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, c); err != nil {
		return client.IgnoreNotFound(err)
	}
	cur := meta.FindStatusCondition(c.Status.Conditions, fleet.ConnectedCondition)
	now := r.now()

	if r.o.Tunnels.Sessions(key) > 0 {
		msg := upMessage(r.o.Replica)
		if cur != nil && cur.Status == metav1.ConditionTrue && cur.Message == msg {
			return nil
		}
		since := now
		if cur != nil && cur.Status == metav1.ConditionTrue {
			since = cur.LastTransitionTime.Time
		}
		if err := r.apply(ctx, c, metav1.ConditionTrue, fleet.TunnelUpReason, msg, since); err != nil {
			return err
		}
		r.event(c, "Normal", ConnectedEvent, "Connect", "The agent's tunnel is up, held by fleet-proxy replica %s", r.o.Replica)
		return nil
	}

	r.c.mu.Lock()
	downAt, wasLocal := r.c.down[key]
	r.c.mu.Unlock()
	if wasLocal {
		if wait := downAt.Add(r.grace).Sub(now); wait > 0 {
			r.queue.AddAfter(key, wait)
			return nil
		}
	}
	done := func() {
		r.c.mu.Lock()
		if r.c.down[key] == downAt {
			delete(r.c.down, key)
		}
		r.c.mu.Unlock()
	}
	if r.o.Tunnels.Held(key) {
		// A peer holds it and writes its own True.
		done()
		return nil
	}
	if cur == nil || cur.Status != metav1.ConditionTrue {
		done()
		return nil
	}
	holder := HolderOf(cur)
	if holder != r.o.Replica {
		running, err := r.o.Running(ctx, holder)
		if err != nil {
			return fmt.Errorf("whether fleet-proxy replica %s runs: %w", holder, err)
		}
		if running {
			// Its True is its own to end.
			done()
			return nil
		}
	}
	if !wasLocal {
		// Gone with a replica (or with this one's previous process):
		// since when is not known better than now.
		downAt = now
	}
	msg := downMessage(downAt, AgentNamespace(c))
	if err := r.apply(ctx, c, metav1.ConditionFalse, fleet.TunnelDownReason, msg, downAt); err != nil {
		return err
	}
	done()
	r.event(c, "Warning", DisconnectedEvent, "Disconnect", "%s", msg)
	return nil
}

// apply writes the one condition by server-side apply on the status, on
// the version c was read at (a conflict retries the decision).
func (r *Reporter) apply(ctx context.Context, c *fleet.Cluster, status metav1.ConditionStatus, reason, msg string, since time.Time) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleet.GroupVersion.String(),
		"kind":       "Cluster",
		"metadata": map[string]any{
			"namespace":       c.Namespace,
			"name":            c.Name,
			"resourceVersion": c.ResourceVersion,
		},
		"status": map[string]any{
			"conditions": []any{map[string]any{
				"type":               fleet.ConnectedCondition,
				"status":             string(status),
				"reason":             reason,
				"message":            msg,
				"lastTransitionTime": since.UTC().Format(time.RFC3339),
			}},
		},
	}}
	err := r.o.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("applying condition Connected=%s to Cluster %s/%s: %w", status, c.Namespace, c.Name, err)
	}
	r.o.Log.Info("Connected condition written", "cluster", c.Namespace+"/"+c.Name, "status", status, "reason", reason)
	return nil
}

func (r *Reporter) event(c *fleet.Cluster, typ, reason, action, note string, args ...any) {
	if r.o.Recorder != nil {
		r.o.Recorder.Eventf(c, nil, typ, reason, action, note, args...)
	}
}

const upPrefix = "The agent's tunnel is held by fleet-proxy replica "

func upMessage(replica string) string { return upPrefix + replica }

// HolderOf names the replica a Connected=True condition says holds the
// tunnel ("" when it names none).
func HolderOf(c *metav1.Condition) string {
	rest, ok := strings.CutPrefix(c.Message, upPrefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

func downMessage(since time.Time, agentNS string) string {
	return fmt.Sprintf("No agent tunnel since %s: check the fleet-agent pods and their logs in namespace %s of the downstream cluster (the agent reaches fleet-proxy through the upstream API server)",
		since.UTC().Format(time.RFC3339), agentNS)
}

// AgentNamespace is where the agent runs downstream: what it reported, or
// what it was deployed to.
func AgentNamespace(c *fleet.Cluster) string {
	switch {
	case c.Status.Agent.Namespace != "":
		return c.Status.Agent.Namespace
	case c.Spec.AgentNamespace != "":
		return c.Spec.AgentNamespace
	}
	return config.DefaultSystemNamespace
}
