package deployer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/hooks"
	"github.com/gitops-fleet/fleet/internal/manifest"
)

const (
	// HookFailedReason is the Deployed condition's reason when a Helm hook
	// failed or did not finish in time; its message names the hook and why.
	HookFailedReason = "HookFailed"

	// DefaultHookTimeout bounds each hook when helm.timeoutSeconds is not
	// set: the Helm CLI's --timeout default.
	DefaultHookTimeout = 300 * time.Second

	// hookPoll is how often a running hook is looked at.
	hookPoll = 500 * time.Millisecond

	// DeleteHooksPrefix starts the name of the Secret (in the agent's
	// namespace) that keeps a BundleDeployment's pre-delete and
	// post-delete hooks: they run after the BundleDeployment is gone.
	DeleteHooksPrefix = "fleet-delete-hooks-"
	deleteHooksKey    = "hooks"
)

// splitContent reads content phase by phase (bundlecontent.SplitPhases):
// objs are the CRDs and the main objects, which form the inventory; hooks
// are the Helm hooks, each once, whatever phases it runs in. Content
// without phases (from a controller older than them) has no hooks: all of
// it is applied as before.
func splitContent(manifests []byte) (objs, hookObjs []*unstructured.Unstructured, err error) {
	sections, err := bundlecontent.SplitPhases(manifests)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range sections {
		decoded, err := manifest.Decode(s.YAML)
		if err != nil {
			return nil, nil, fmt.Errorf("phase %s: %w", s.Phase, err)
		}
		switch s.Phase {
		case bundlecontent.PhaseCRDs, bundlecontent.PhaseMain:
			objs = append(objs, decoded...)
		default:
			hookObjs = append(hookObjs, decoded...)
		}
	}
	return objs, hookObjs, nil
}

// hookRun is what a deployment's hooks need besides the hooks themselves.
type hookRun struct {
	d       *Deployer
	id      *identity
	hooks   []*unstructured.Unstructured
	timeout time.Duration
}

func (d *Deployer) newHookRun(bd *fleet.BundleDeployment, id *identity, hookObjs []*unstructured.Unstructured) (*hookRun, error) {
	opts := bd.Spec.Options
	p, err := prepareObjects(hookObjs, opts, d.local.RESTMapper(), func([]*unstructured.Unstructured) {})
	if err != nil {
		return nil, err
	}
	return &hookRun{d: d, id: id, hooks: p.objects, timeout: hookTimeout(opts)}, nil
}

func hookTimeout(opts fleet.BundleDeploymentOptions) time.Duration {
	if h := opts.Helm; h != nil && h.TimeoutSeconds > 0 {
		return time.Duration(h.TimeoutSeconds) * time.Second
	}
	return DefaultHookTimeout
}

// preHooks runs before the main objects of a new deployment (or a forced
// sync): the CRDs and the namespaces first, waited for (a hook may need
// them), then the pre-install hooks when the BundleDeployment has never
// been applied on this cluster, else the pre-upgrade hooks.
func (r *hookRun) preHooks(ctx context.Context, bd *fleet.BundleDeployment, p *prepared, prev *inventory) error {
	phase := bundlecontent.PhasePreUpgrade
	if bd.Status.AppliedDeploymentID == "" {
		phase = bundlecontent.PhasePreInstall
	}
	if len(r.of(phase)) == 0 {
		return nil
	}
	key := hooksKey(bd)
	if prev != nil && (prev.HooksRun == key+"|pre" || prev.HooksRun == key+"|post") {
		// This deployment's pre hooks ran already: the apply after them
		// is being retried.
		return nil
	}
	var defs []*unstructured.Unstructured
	if p.namespace != nil {
		err := r.d.local.Get(ctx, client.ObjectKey{Name: p.namespace.GetName()}, &corev1.Namespace{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && p.namespaceMeta):
			defs = append(defs, p.namespace.DeepCopy())
		case err != nil:
			return fmt.Errorf("reading namespace %s: %w", p.namespace.GetName(), err)
		}
	}
	var defRefs []objRef
	for _, o := range p.objects {
		if o.GroupVersionKind().GroupKind().String() == "CustomResourceDefinition.apiextensions.k8s.io" || (o.GetKind() == "Namespace" && o.GroupVersionKind().Group == "") {
			defs = append(defs, o.DeepCopy())
			defRefs = append(defRefs, refOf(o))
		}
	}
	if len(defs) > 0 {
		opts := ssa.DefaultApplyOptions()
		opts.WaitInterval = hookPoll
		opts.WaitTimeout = r.timeout
		_, err := r.id.rm.ApplyAllStaged(ctx, defs, opts)
		// What was applied is remembered, so a later prune finds it.
		if perr := r.d.inv.put(ctx, r.d.newInventory(bd, r.id, union(defRefs, prev))); perr != nil {
			err = errors.Join(err, perr)
		}
		if err != nil {
			return fmt.Errorf("applying the CRDs and namespaces before the %s hooks: %w", phase, err)
		}
	}
	if err := r.run(ctx, phase); err != nil {
		return err
	}
	return r.recordHooksRun(ctx, bd, key+"|pre")
}

// hooksKey names one deployment of a BundleDeployment: its deploymentID and
// forced sync generation (what makes the agent apply again).
func hooksKey(bd *fleet.BundleDeployment) string {
	return fmt.Sprintf("%s/%d", bd.Spec.DeploymentID, bd.Spec.Options.ForceSyncGeneration)
}

// recordHooksRun writes into the inventory that the deployment completed
// a hook step, before anything that could fail after it.
func (r *hookRun) recordHooksRun(ctx context.Context, bd *fleet.BundleDeployment, step string) error {
	cur, err := r.d.inv.get(ctx, bd.Name)
	if err != nil {
		return err
	}
	inv := r.d.newInventory(bd, r.id, nil)
	if cur != nil {
		c := *cur
		inv = &c
	}
	inv.HooksRun = step
	return r.d.inv.put(ctx, inv)
}

// postHooks runs after the main objects: post-install or post-upgrade, as
// preHooks chose. It then keeps the deployment's delete hooks for when the
// BundleDeployment is deleted.
func (r *hookRun) postHooks(ctx context.Context, bd *fleet.BundleDeployment) error {
	phase := bundlecontent.PhasePostUpgrade
	if bd.Status.AppliedDeploymentID == "" {
		phase = bundlecontent.PhasePostInstall
	}
	key := hooksKey(bd)
	if cur, err := r.d.inv.get(ctx, bd.Name); err != nil {
		return err
	} else if cur != nil && cur.HooksRun == key+"|post" {
		return nil
	}
	if err := r.run(ctx, phase); err != nil {
		return err
	}
	if err := r.d.keepDeleteHooks(ctx, bd.Name, r); err != nil {
		return err
	}
	if len(r.of(phase)) == 0 {
		return nil
	}
	return r.recordHooksRun(ctx, bd, key+"|post")
}

// of returns the hooks of a phase in the order Helm runs them.
func (r *hookRun) of(phase bundlecontent.Phase) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, h := range r.hooks {
		if slices.Contains(hooks.Phases(h), phase) {
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, hooks.Compare)
	return out
}

// run runs the hooks of a phase one after the other, as Helm does: each is
// deleted first (before-hook-creation, the default), applied, and waited
// for (a Job until Complete, a Pod until Succeeded, anything else until
// kstatus Current) within the timeout before the next. A failure stops the
// phase; the failed hook is deleted if it asks (hook-failed), and so are
// the hooks that succeeded before it (hook-succeeded). When all succeed,
// those asking hook-succeeded are deleted, last first.
func (r *hookRun) run(ctx context.Context, phase bundlecontent.Phase) error {
	list := r.of(phase)
	if len(list) == 0 {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	for i, h := range list {
		if hooks.HasDeletePolicy(h, hooks.BeforeHookCreation) {
			if err := r.remove(ctx, h); err != nil {
				return fmt.Errorf("%s hook %s: deleting the previous one: %w", phase, describe(h), err)
			}
		}
		opts := ssa.DefaultApplyOptions()
		if _, err := r.id.rm.Apply(ctx, h.DeepCopy(), opts); err != nil {
			return fmt.Errorf("%s hook %s failed: %w", phase, describe(h), err)
		}
		log.Info("hook started", "phase", phase, "hook", describe(h))
		if err := r.wait(ctx, phase, h); err != nil {
			if hooks.HasDeletePolicy(h, hooks.HookFailed) {
				err = errors.Join(err, r.remove(ctx, h))
			}
			for _, done := range list[:i] {
				if hooks.HasDeletePolicy(done, hooks.HookSucceeded) {
					err = errors.Join(err, r.remove(ctx, done))
				}
			}
			return err
		}
	}
	for _, h := range slices.Backward(list) {
		if hooks.HasDeletePolicy(h, hooks.HookSucceeded) {
			if err := r.remove(ctx, h); err != nil {
				return fmt.Errorf("%s hook %s succeeded, deleting it failed: %w", phase, describe(h), err)
			}
		}
	}
	log.Info("hooks done", "phase", phase, "hooks", len(list))
	return nil
}

// wait polls a hook until it is done, fails, or the timeout passes.
func (r *hookRun) wait(ctx context.Context, phase bundlecontent.Phase, h *unstructured.Unstructured) error {
	deadline := time.Now().Add(r.timeout)
	last := "not found"
	for {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(h.GroupVersionKind())
		err := r.id.c.Get(ctx, client.ObjectKeyFromObject(h), u)
		switch {
		case err == nil:
			done, failed, progress := hookState(u)
			if failed != "" {
				return fmt.Errorf("%s hook %s failed: %s", phase, describe(h), r.why(ctx, u, failed))
			}
			if done {
				return nil
			}
			last = progress
		case apierrors.IsNotFound(err):
			last = "not found"
		default:
			return fmt.Errorf("%s hook %s: %w", phase, describe(h), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s hook %s did not finish within %s (helm.timeoutSeconds): %s", phase, describe(h), r.timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hookPoll):
		}
	}
}

// hookState says whether a hook is done, has failed (and why), or how far
// it is.
func hookState(u *unstructured.Unstructured) (done bool, failed, progress string) {
	switch u.GroupVersionKind().GroupKind().String() {
	case "Job.batch":
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["status"] != "True" {
				continue
			}
			switch m["type"] {
			case "Complete":
				return true, "", ""
			case "Failed":
				return false, fmt.Sprintf("Job failed: %v: %v", m["reason"], m["message"]), ""
			}
		}
		active, _, _ := unstructured.NestedInt64(u.Object, "status", "active")
		failedPods, _, _ := unstructured.NestedInt64(u.Object, "status", "failed")
		return false, "", fmt.Sprintf("Job not complete (active pods: %d, failed pods: %d)", active, failedPods)
	case "Pod":
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		switch phase {
		case "Succeeded":
			return true, "", ""
		case "Failed":
			return false, "Pod failed" + podTermination(u), ""
		}
		return false, "", "Pod phase " + phase
	}
	res, err := status.Compute(u)
	if err != nil {
		return false, "", "status unknown: " + err.Error()
	}
	switch res.Status {
	case status.CurrentStatus:
		return true, "", ""
	case status.FailedStatus:
		return false, res.Message, ""
	}
	return false, "", string(res.Status) + ": " + res.Message
}

// why adds to a failed Job what its last failed pod said (exit code,
// reason, termination message), when the identity may read its pods.
func (r *hookRun) why(ctx context.Context, u *unstructured.Unstructured, failed string) string {
	if u.GetKind() != "Job" {
		return failed
	}
	pods := &unstructured.UnstructuredList{}
	pods.SetAPIVersion("v1")
	pods.SetKind("PodList")
	if err := r.id.c.List(ctx, pods, client.InNamespace(u.GetNamespace()), client.MatchingLabels{"job-name": u.GetName()}); err != nil {
		return failed
	}
	for i := len(pods.Items) - 1; i >= 0; i-- {
		if t := podTermination(&pods.Items[i]); t != "" {
			return failed + "; pod " + pods.Items[i].GetName() + t
		}
	}
	return failed
}

// podTermination describes how a pod's containers ended in failure.
func podTermination(u *unstructured.Unstructured) string {
	statuses, _, _ := unstructured.NestedSlice(u.Object, "status", "containerStatuses")
	var parts []string
	for _, s := range statuses {
		m, _ := s.(map[string]any)
		term, ok, _ := unstructured.NestedMap(m, "state", "terminated")
		if !ok {
			continue
		}
		code, _, _ := unstructured.NestedInt64(term, "exitCode")
		if code == 0 {
			continue
		}
		p := fmt.Sprintf("container %v exited with code %d", m["name"], code)
		if reason, _ := term["reason"].(string); reason != "" {
			p += " (" + reason + ")"
		}
		if msg, _ := term["message"].(string); msg != "" {
			p += ": " + strings.TrimSpace(msg)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, "; ")
}

// remove deletes a hook (its pods too, in the background) and waits until
// it is gone, within the timeout.
func (r *hookRun) remove(ctx context.Context, h *unstructured.Unstructured) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(h.GroupVersionKind())
	u.SetNamespace(h.GetNamespace())
	u.SetName(h.GetName())
	err := r.id.c.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.timeout)
	for {
		err := r.id.c.Get(ctx, client.ObjectKeyFromObject(u), u.DeepCopy())
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still exists %s after its deletion", describe(h), r.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hookPoll):
		}
	}
}

func describe(o *unstructured.Unstructured) string { return refOf(o).String() }

// deleteHooks is what the delete-hooks Secret keeps.
type deleteHooks struct {
	TimeoutSeconds int64                        `json:"timeoutSeconds"`
	Hooks          []*unstructured.Unstructured `json:"hooks"`
}

// DeleteHooksName is the Secret keeping a BundleDeployment's delete
// hooks, shortened with a hash suffix like InventoryName.
func DeleteHooksName(bundleDeployment string) string {
	const maxLen = 253
	n := DeleteHooksPrefix + bundleDeployment
	if len(n) <= maxLen {
		return n
	}
	sum := sha256.Sum256([]byte(bundleDeployment))
	h := hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(n[:maxLen-len(h)-1], "-.") + "-" + h
}

// keepDeleteHooks stores the pre-delete and post-delete hooks of the
// deployment just applied, or removes them when it has none. They are kept
// in a Secret: a hook may be a Secret itself.
func (d *Deployer) keepDeleteHooks(ctx context.Context, bdName string, r *hookRun) error {
	var keep []*unstructured.Unstructured
	for _, h := range r.hooks {
		ps := hooks.Phases(h)
		if slices.Contains(ps, bundlecontent.PhasePreDelete) || slices.Contains(ps, bundlecontent.PhasePostDelete) {
			keep = append(keep, h)
		}
	}
	if len(keep) == 0 {
		return d.forgetDeleteHooks(ctx, bdName)
	}
	b, err := json.Marshal(deleteHooks{TimeoutSeconds: int64(r.timeout / time.Second), Hooks: keep})
	if err != nil {
		return err
	}
	return d.putBDSecret(ctx, DeleteHooksName(bdName), bdName, "delete hooks secret", nil, deleteHooksKey, b)
}

func (d *Deployer) forgetDeleteHooks(ctx context.Context, bdName string) error {
	return d.deleteBDSecret(ctx, DeleteHooksName(bdName), "delete hooks secret")
}

// runDeleteHooks runs the kept pre-delete or post-delete hooks of a deleted
// BundleDeployment as id, bounded by the timeout it was deployed with.
// Nobody is left to read a failure in a status: it is logged, and the
// removal goes on (a BundleDeployment that is gone cannot be fixed).
func (d *Deployer) runDeleteHooks(ctx context.Context, bdName string, id *identity, phase bundlecontent.Phase) {
	log := ctrl.LoggerFrom(ctx)
	s := &corev1.Secret{}
	err := d.local.Get(ctx, client.ObjectKey{Namespace: d.opts.AgentNamespace, Name: DeleteHooksName(bdName)}, s)
	if apierrors.IsNotFound(err) {
		return
	}
	var kept deleteHooks
	if err == nil {
		err = json.Unmarshal(s.Data[deleteHooksKey], &kept)
	}
	if err != nil {
		log.Error(err, "reading the delete hooks of a deleted bundledeployment", "phase", phase)
		return
	}
	r := &hookRun{d: d, id: id, hooks: kept.Hooks, timeout: time.Duration(kept.TimeoutSeconds) * time.Second}
	if r.timeout <= 0 {
		r.timeout = DefaultHookTimeout
	}
	if err := r.run(ctx, phase); err != nil {
		log.Error(err, "delete hook failed; the removal goes on", "phase", phase)
	}
}
