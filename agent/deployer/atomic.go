package deployer

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/manifest"
)

// This file holds helm.atomic and helm.maxHistory. Helm keeps release
// revisions in the cluster; the deployer keeps, per BundleDeployment, the
// last deployments that became Ready (manifests gzipped, options) in one
// Secret of the agent's namespace downstream, "fleet-history-<name>": the
// agent can go back without the upstream, and a deployment's content never
// leaves the cluster it was meant for. With atomic, a deployment that does
// not become Ready within its health timeout is replaced by the newest of
// them (applied, what it added pruned), and the status says so (Deployed
// and Ready False, reason RolledBack); a new deployment ID or a
// forceSyncGeneration bump tries again.

const (
	// RolledBackReason: the deployment did not become ready within its
	// health timeout and helm.atomic went back to the previous one.
	RolledBackReason = "RolledBack"
	// HistoryPrefix starts the name of every history Secret.
	HistoryPrefix = "fleet-history-"
	// HistoryLabel marks history Secrets.
	HistoryLabel = "fleet.cattle.io/deployment-history"
	historyKey   = "history"

	// maxHistoryCap bounds helm.maxHistory, and historyBytes the history
	// Secret's data: the oldest deployments are dropped first.
	maxHistoryCap = 10
	historyBytes  = 768 << 10
)

// history is what the history Secret holds.
type history struct {
	// Entries are deployments that became Ready, newest first.
	Entries []historyEntry `json:"entries"`
	// RolledBackFrom is the deployment (deploymentID@forceSyncGeneration)
	// that atomic replaced with Entries[0].
	RolledBackFrom string `json:"rolledBackFrom,omitempty"`
}

type historyEntry struct {
	DeploymentID string                        `json:"deploymentID"`
	Options      fleet.BundleDeploymentOptions `json:"options"`
	// Manifests are gzipped.
	Manifests []byte `json:"manifests"`
}

// historyLength is how many Ready deployments are kept, the one in force
// included (as Helm counts revisions): helm.maxHistory up to
// maxHistoryCap, and at least one with atomic; 0 keeps none.
func historyLength(opts fleet.BundleDeploymentOptions) int {
	h := opts.Helm
	if h == nil {
		return 0
	}
	n := min(max(h.MaxHistory, 0), maxHistoryCap)
	if h.Atomic && n == 0 {
		n = 1
	}
	return n
}

func isAtomic(opts fleet.BundleDeploymentOptions) bool { return opts.Helm != nil && opts.Helm.Atomic }

func rollbackKey(bd *fleet.BundleDeployment) string {
	return bd.Spec.DeploymentID + "@" + strconv.FormatInt(bd.Spec.Options.ForceSyncGeneration, 10)
}

// HistoryName is the history Secret of a BundleDeployment.
func HistoryName(bundleDeployment string) string {
	return HistoryPrefix + InventoryName(bundleDeployment)[len(InventoryPrefix):]
}

func (d *Deployer) getHistory(ctx context.Context, name string) (*history, error) {
	s := &corev1.Secret{}
	err := d.local.Get(ctx, client.ObjectKey{Namespace: d.opts.AgentNamespace, Name: HistoryName(name)}, s)
	if apierrors.IsNotFound(err) {
		return &history{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading deployment history %s/%s: %w", d.opts.AgentNamespace, HistoryName(name), err)
	}
	h := &history{}
	if err := json.Unmarshal(s.Data[historyKey], h); err != nil {
		return nil, fmt.Errorf("deployment history %s/%s is not valid: %w", d.opts.AgentNamespace, s.Name, err)
	}
	return h, nil
}

// putHistory writes the history, dropping its oldest entries while it is
// larger than historyBytes.
func (d *Deployer) putHistory(ctx context.Context, name string, h *history) error {
	var data []byte
	for {
		var err error
		if data, err = json.Marshal(h); err != nil {
			return err
		}
		if len(data) <= historyBytes || len(h.Entries) == 0 {
			break
		}
		h.Entries = h.Entries[:len(h.Entries)-1]
	}
	return d.putBDSecret(ctx, HistoryName(name), name, "deployment history", map[string]string{HistoryLabel: "true"}, historyKey, data)
}

// removeHistory deletes the history of a deleted BundleDeployment.
func (d *Deployer) removeHistory(ctx context.Context, name string) error {
	return d.deleteBDSecret(ctx, HistoryName(name), "deployment history")
}

// desired returns the manifests and options to apply: the
// BundleDeployment's, or, once atomic went back from this very deployment,
// the earlier deployment's (back: which one).
func (d *Deployer) desired(ctx context.Context, bd *fleet.BundleDeployment) ([]byte, fleet.BundleDeploymentOptions, *historyEntry, error) {
	if isAtomic(bd.Spec.Options) {
		h, err := d.getHistory(ctx, bd.Name)
		if err != nil {
			return nil, bd.Spec.Options, nil, err
		}
		if h.RolledBackFrom == rollbackKey(bd) && len(h.Entries) > 0 {
			e := &h.Entries[0]
			m, err := gunzip(e.Manifests)
			if err != nil {
				return nil, bd.Spec.Options, nil, fmt.Errorf("deployment history of %s: %w", bd.Name, err)
			}
			return m, e.Options, e, nil
		}
	}
	m, err := d.readContent(ctx, bd)
	return m, bd.Spec.Options, nil, err
}

// afterMonitor keeps the history and goes back on failure: a deployment
// that is Ready is remembered; one that timed out with atomic is replaced
// by the newest remembered one; one already replaced is reported so.
func (d *Deployer) afterMonitor(ctx context.Context, bd *fleet.BundleDeployment, id *identity, manifests []byte, back *historyEntry,
	o observation, next time.Duration, err error) (observation, time.Duration, error) {
	if back != nil {
		o.Failed = &failure{Reason: RolledBackReason, Message: rolledBackMessage(bd, back)}
		return o, next, err
	}
	if err != nil || !o.Monitored || o.MonitorError != "" {
		return o, next, err
	}
	if len(o.NonReady) == 0 {
		return o, next, d.remember(ctx, bd, manifests)
	}
	if !o.HealthTimedOut || !isAtomic(bd.Spec.Options) {
		return o, next, nil
	}
	h, err := d.getHistory(ctx, bd.Name)
	if err != nil {
		return o, next, err
	}
	if len(h.Entries) == 0 || h.Entries[0].DeploymentID == bd.Spec.DeploymentID {
		return o, next, nil // nothing earlier to go back to: HealthTimeout stands
	}
	e := &h.Entries[0]
	if err := d.goBack(ctx, bd, id, e); err != nil {
		o.Failed = &failure{Reason: RolledBackReason, Message: fmt.Sprintf("deployment %s did not become ready within its health timeout; going back to deployment %s failed: %v", shortID(bd.Spec.DeploymentID), shortID(e.DeploymentID), err)}
		return o, next, err
	}
	h.RolledBackFrom = rollbackKey(bd)
	if err := d.putHistory(ctx, bd.Name, h); err != nil {
		return o, next, err
	}
	ctrl.LoggerFrom(ctx).Info("went back to the previous deployment (atomic)", "failed", shortID(bd.Spec.DeploymentID), "now", shortID(e.DeploymentID))
	o.Failed = &failure{Reason: RolledBackReason, Message: rolledBackMessage(bd, e)}
	return o, healthPoll, nil
}

func rolledBackMessage(bd *fleet.BundleDeployment, back *historyEntry) string {
	return fmt.Sprintf("deployment %s did not become ready within its health timeout: helm.atomic went back to deployment %s; a new deployment or a forceSyncGeneration bump tries again",
		shortID(bd.Spec.DeploymentID), shortID(back.DeploymentID))
}

// goBack applies an earlier deployment in place of the failed one and
// prunes what only the failed one had.
func (d *Deployer) goBack(ctx context.Context, bd *fleet.BundleDeployment, id *identity, e *historyEntry) error {
	m, err := gunzip(e.Manifests)
	if err != nil {
		return err
	}
	objs, err := manifest.Decode(m)
	if err != nil {
		return err
	}
	p, err := prepareObjects(objs, e.Options, d.local.RESTMapper(), func(objs []*unstructured.Unstructured) {
		d.self.rm.SetOwnerLabels(objs, bd.Name, bd.Namespace)
	})
	if err != nil {
		return err
	}
	prev, err := d.inv.get(ctx, bd.Name)
	if err != nil {
		return err
	}
	return d.apply(ctx, bd, id, p, prev, nil)
}

// remember records a Ready deployment as the newest of the history, when
// the options keep one and it is not recorded yet.
func (d *Deployer) remember(ctx context.Context, bd *fleet.BundleDeployment, manifests []byte) error {
	n := historyLength(bd.Spec.Options)
	if n == 0 || manifests == nil {
		return nil
	}
	h, err := d.getHistory(ctx, bd.Name)
	if err != nil {
		return err
	}
	if len(h.Entries) > 0 && h.Entries[0].DeploymentID == bd.Spec.DeploymentID && len(h.Entries) <= n && h.RolledBackFrom == "" {
		return nil
	}
	if len(h.Entries) == 0 || h.Entries[0].DeploymentID != bd.Spec.DeploymentID {
		data, err := bundlecontent.Encode(manifests)
		if err != nil {
			return err
		}
		h.Entries = append([]historyEntry{{DeploymentID: bd.Spec.DeploymentID, Options: *bd.Spec.Options.DeepCopy(), Manifests: data[bundlecontent.KeyManifests]}}, h.Entries...)
	}
	h.Entries = h.Entries[:min(len(h.Entries), n)]
	h.RolledBackFrom = ""
	return d.putHistory(ctx, bd.Name, h)
}

func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("history manifests are not gzip: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, bundlecontent.MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(out) > bundlecontent.MaxManifestBytes {
		return nil, fmt.Errorf("history manifests exceed the size limit")
	}
	return out, nil
}
