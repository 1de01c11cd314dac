package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/fluxcd/pkg/ssa"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/metrics"
	"github.com/gitops-fleet/fleet/controller/remote"
	"github.com/gitops-fleet/fleet/controller/remote/restconfig"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// Keys of a kubeconfig Secret.
const (
	KubeconfigKey     = "value"
	KubeconfigKeyYAML = "value.yaml"
	APIServerURLKey   = "apiServerURL"
	APIServerCAKey    = "apiServerCA"
)

// Why a deploy happens, for events and metrics.
const (
	deployFirst      = "first"
	deployGeneration = "generation"
	deployServer     = "server"
	deploySettings   = "settings" // the agent's values or its chart
)

// reconcileImport pushes the agent to a manager-initiated cluster when it
// has never been deployed, redeployAgentGeneration was bumped, a setting
// given to the agent or the agent chart changed, or the kubeconfig now points
// at another server. Otherwise it writes nothing downstream and does not even
// connect.
func (r *Reconciler) reconcileImport(ctx context.Context, p *pass) error {
	p.imported = true
	cluster, cfg := p.cluster, p.cfg
	memoKey := r.importMemoKey(ctx, cluster, cfg)
	if memoKey != nil && r.memo.seen(client.ObjectKeyFromObject(cluster), *memoKey) {
		return nil
	}
	in := p.kubeconfig
	if in == nil {
		var err error
		if in, err = r.readKubeconfig(ctx, cluster, cfg); err != nil {
			metrics.RegistrationSteps.WithLabelValues("import", "invalid").Inc()
			return err
		}
	}
	bootstrap := &agentvalues.Bootstrap{
		APIServerURL:                in.apiServerURL,
		APIServerCA:                 in.apiServerCA,
		TokenName:                   names.ImportToken(cluster.Name),
		ClusterNamespace:            cluster.Namespace,
		SystemRegistrationNamespace: config.DefaultSystemRegistrationNS,
		Token:                       agentvalues.TokenPlaceholder,
	}
	values, err := agentvalues.ForCluster(cluster, cfg, bootstrap)
	if err != nil {
		reason := fleet.RenderFailedReason
		var insecure *config.InsecureAPIServerURLError
		switch {
		case errors.Is(err, agentvalues.ErrNoAPIServerURL):
			reason = fleet.MissingAPIServerURLReason
		case errors.As(err, &insecure):
			reason = fleet.APIServerURLInsecureReason
		}
		return reconciler.Stall(reason, "cannot build the agent: %v", err)
	}
	// The hash covers the agent chart too: a controller upgrade that ships
	// a changed chart redeploys once, a restart with the same chart does not.
	valuesHash, err := r.Renderer.Hash(values)
	if err != nil {
		return reconciler.Retry(fleet.RenderFailedReason, err)
	}

	why := deployReason(cluster, valuesHash, in.serverHash)
	if why != "" && r.deploys.seen(client.ObjectKeyFromObject(cluster), deployRecordOf(cluster, valuesHash, in.serverHash)) {
		// This controller pushed exactly this, but the status write of
		// that pass failed: record it instead of pushing again.
		recordDeployed(cluster, values, valuesHash, in.serverHash)
		why = ""
	}
	// The render of the agent takes milliseconds of CPU: it runs beside
	// the reads between here and the push it is for. Not in the pass that
	// made the import token: that pass waits for the token instead.
	var rendered func() ([]*unstructured.Unstructured, error)
	if why != "" && !p.importTokenMade {
		rendered = renderInBackground(r.Renderer, values)
	}
	if why != "" && r.APIReader != nil && r.deployedPerAPIServer(ctx, cluster, valuesHash, in.serverHash) {
		// The cache had not caught up with the status written after this
		// controller's own deploy: record that deploy again instead of
		// pushing (and minting an import token) a second time.
		recordDeployed(cluster, values, valuesHash, in.serverHash)
		why = ""
	}
	if why == deploySettings && (p.rollout.Hold || p.rollout.Renderer != nil) {
		// A staged rollout holds this agent back (or put it back): its
		// agent Bundle says what it runs, and no push overrides that.
		return nil
	}
	if why == "" {
		if memoKey != nil {
			r.memo.remember(client.ObjectKeyFromObject(cluster), *memoKey)
		}
		return nil
	}
	cluster.Status.AgentConfigChanged = why == deploySettings || why == deployServer

	if p.importTokenMade {
		// The import-token phase made it in this pass: the cache cannot
		// show it yet, and the token controller has yet to prepare it.
		metrics.RegistrationSteps.WithLabelValues("token", "waiting").Inc()
		return reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for import token %s to be prepared", names.ImportToken(cluster.Name))
	}
	token, err := r.importToken(ctx, cluster, cfg, p.now)
	if err != nil {
		metrics.RegistrationSteps.WithLabelValues("token", "waiting").Inc()
		var w *reconciler.Waiting
		if !errors.As(err, &w) {
			err = reconciler.Retry(fleet.WaitingForTokenReason, fmt.Errorf("preparing import token %s: %w", names.ImportToken(cluster.Name), err))
		}
		return err
	}

	start := time.Now()
	host, err := r.deploy(ctx, cluster, values, rendered, token, in.kubeconfig)
	if err != nil {
		reason, msg := remote.Classify(host, err)
		metrics.RegistrationSteps.WithLabelValues("import", "error").Inc()
		reconciler.Eventf(r.Recorder, cluster, nil, corev1.EventTypeWarning, reason, "DeployAgent", "%s", msg)
		var inErr *remote.InputError
		if errors.As(err, &inErr) {
			return reconciler.Stall(reason, "%s", msg)
		}
		// The classified message, not err: a conflict or an AlreadyExists
		// downstream is no race with another writer upstream.
		return reconciler.Retry(reason, errors.New(msg))
	}
	metrics.AgentDeployDuration.Observe(time.Since(start).Seconds())
	metrics.AgentDeploys.WithLabelValues(why).Inc()
	metrics.RegistrationSteps.WithLabelValues("import", "success").Inc()

	recordDeployed(cluster, values, valuesHash, in.serverHash)
	r.deploys.remember(client.ObjectKeyFromObject(cluster), deployRecordOf(cluster, valuesHash, in.serverHash))
	event, verb := "AgentDeployed", "deployed"
	if why != deployFirst {
		event, verb = "AgentRedeployed", "redeployed ("+why+" changed)"
	}
	reconciler.Eventf(r.Recorder, cluster, nil, corev1.EventTypeNormal, event, "DeployAgent",
		"agent %s to %s at generation %d in namespace %s", verb, host, cluster.Spec.RedeployAgentGeneration, values.Internal.SystemNamespace)
	ctrl.LoggerFrom(ctx).Info("agent deployed", "reason", why, "server", host, "generation", cluster.Spec.RedeployAgentGeneration)
	return nil
}

// deployedPerAPIServer reports whether the live Cluster says the agent is
// already deployed as wanted. Deploys are rare, so the extra read happens
// only when the cached status asks for one.
func (r *Reconciler) deployedPerAPIServer(ctx context.Context, cluster *fleet.Cluster, valuesHash, serverHash string) bool {
	live := &fleet.Cluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cluster), live); err != nil {
		return false
	}
	return live.Generation == cluster.Generation && deployReason(live, valuesHash, serverHash) == ""
}

// deployReason says why the agent must be (re)deployed, or "".
func deployReason(cluster *fleet.Cluster, valuesHash, serverHash string) string {
	st := &cluster.Status
	switch {
	case st.AgentDeployedGeneration == nil:
		return deployFirst
	case *st.AgentDeployedGeneration != cluster.Spec.RedeployAgentGeneration:
		return deployGeneration
	case st.KubeConfigServerHash != serverHash:
		return deployServer
	case st.AgentValuesHash != valuesHash:
		return deploySettings
	}
	return ""
}

type kubeconfigInput struct {
	kubeconfig   []byte
	serverHash   string
	apiServerURL string
	apiServerCA  []byte
}

// readKubeconfig reads and checks the kubeconfig Secret. A problem with it
// stalls the Cluster: the user must fix the Secret or the Cluster. Nothing in the
// kubeconfig is used before it passed the controller's kubeconfig policy.
func (r *Reconciler) readKubeconfig(ctx context.Context, cluster *fleet.Cluster, cfg *config.Config) (*kubeconfigInput, error) {
	ns := cluster.Spec.KubeConfigSecretNamespace
	if ns == "" {
		ns = cluster.Namespace
	}
	if !cfg.KubeConfigSecretNamespaceAllowed(cluster.Namespace, ns) {
		return nil, reconciler.Stall(fleet.NamespaceNotAllowedReason,
			"spec.kubeConfigSecretNamespace %q is not allowed: keep the kubeconfig Secret in the Cluster's own namespace %q, or list %q for workspace %q under kubeConfigSecretNamespaces in the controller configuration", ns, cluster.Namespace, ns, cluster.Namespace)
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ns, Name: cluster.Spec.KubeConfigSecret}
	if err := r.Client.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, reconciler.Stall(fleet.KubeConfigSecretMissingReason,
				"kubeconfig Secret %s not found: create it with the downstream cluster's kubeconfig under key %q (Cluster API format)", key, KubeconfigKey)
		}
		return nil, fmt.Errorf("reading kubeconfig Secret %s: %w", key, err)
	}
	kcKey := KubeconfigKey
	kc, ok := secret.Data[kcKey]
	if !ok {
		kcKey = KubeconfigKeyYAML
		kc, ok = secret.Data[kcKey]
	}
	if !ok || len(kc) == 0 {
		return nil, reconciler.Stall(fleet.KubeConfigKeyMissingReason,
			"kubeconfig Secret %s has no key %q (nor %q): put the downstream kubeconfig under key %q", key, KubeconfigKey, KubeconfigKeyYAML, KubeconfigKey)
	}
	serverHash, err := restconfig.ServerHash(kc, cfg.InsecureKubeconfig)
	if err != nil {
		reason := fleet.KubeConfigInvalidReason
		var kcErr *restconfig.Error
		if errors.As(err, &kcErr) {
			reason = kcErr.Reason
		}
		return nil, reconciler.Stall(reason, "kubeconfig Secret %s, key %q: %v", key, kcKey, err)
	}
	apiServerURL := strings.TrimSpace(string(secret.Data[APIServerURLKey]))
	if err := cfg.CheckAPIServerURLScheme(apiServerURL); err != nil {
		return nil, reconciler.Stall(fleet.APIServerURLInsecureReason, "kubeconfig Secret %s, key %q: %v", key, APIServerURLKey, err)
	}
	return &kubeconfigInput{
		kubeconfig:   kc,
		serverHash:   serverHash,
		apiServerURL: apiServerURL,
		apiServerCA:  secret.Data[APIServerCAKey],
	}, nil
}

// importToken returns the bearer token of import-token-<cluster>, creating
// the token (bound to the Cluster's clientID) or renewing it when less than
// half its lifetime is left. While the token controller prepares it, the pass
// waits (a *reconciler.Waiting); the token's status change re-triggers this
// reconcile.
func (r *Reconciler) importToken(ctx context.Context, cluster *fleet.Cluster, cfg *config.Config, now time.Time) (string, error) {
	name := names.ImportToken(cluster.Name)
	ttl := cfg.GetImportTokenTTL()
	tok := &fleet.ClusterRegistrationToken{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, tok)
	if apierrors.IsNotFound(err) {
		if err := r.createImportToken(ctx, cluster, cfg); err != nil {
			return "", err
		}
		return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for import token %s to be prepared", name)
	}
	if err != nil {
		return "", err
	}
	if !tok.DeletionTimestamp.IsZero() {
		return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for the old import token %s to be removed", name)
	}
	if exp := tok.Status.Expires; exp != nil && exp.Sub(now) < ttl/2 || tok.Spec.ClientID != cluster.Spec.ClientID {
		if err := r.Client.Delete(ctx, tok); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
		return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "renewing import token %s", name)
	}
	if tok.Status.SecretName == "" {
		return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for import token %s to be prepared", name)
	}
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tok.Namespace, Name: tok.Status.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "waiting for the values Secret of import token %s", name)
		}
		return "", err
	}
	bearer := token.Bearer(secret)
	if bearer == "" {
		return "", reconciler.Wait(fleet.WaitingForTokenReason, 0, "the values Secret of import token %s holds no token yet", name)
	}
	return bearer, nil
}

// createImportToken creates import-token-<cluster>, controlled by the
// Cluster and bound to its clientID (one made meanwhile is no error).
func (r *Reconciler) createImportToken(ctx context.Context, cluster *fleet.Cluster, cfg *config.Config) error {
	tok := &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: names.ImportToken(cluster.Name), Labels: map[string]string{
			fleet.ManagedLabel: "true", fleet.ClusterLabel: cluster.Name,
		}},
		Spec: fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: cfg.GetImportTokenTTL()}, ClientID: cluster.Spec.ClientID},
	}
	if err := controllerutil.SetControllerReference(cluster, tok, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, tok, client.FieldOwner(reconciler.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// startImportToken runs first in a pass of a Cluster whose agent is to be
// deployed for the first time, or again after a redeployAgentGeneration
// bump: it creates the import token when there is none, so that the token
// controller prepares it (import identity, TokenRequest, values Secret)
// while this pass makes the cluster namespace and the agent Bundle, not
// after them: the push waits for the token. The kubeconfig Secret is read
// and checked first (no import identity for a Cluster whose kubeconfig is
// refused); the import phase uses what was read, and reports what was
// wrong.
func (r *Reconciler) startImportToken(ctx context.Context, p *pass) error {
	in, err := r.readKubeconfig(ctx, p.cluster, p.cfg)
	if err != nil {
		return nil
	}
	p.kubeconfig = in
	if rc, err := r.Remotes.Get(client.ObjectKeyFromObject(p.cluster), in.kubeconfig, p.cfg.InsecureKubeconfig); err == nil {
		// While the token controller prepares the token, the push's
		// discovery is done (the import phase reports a client error).
		rc.Prepare(renderer.AgentKinds)
	}
	tok := &fleet.ClusterRegistrationToken{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: p.cluster.Namespace, Name: names.ImportToken(p.cluster.Name)}, tok)
	if !apierrors.IsNotFound(err) {
		return nil
	}
	if err := r.createImportToken(ctx, p.cluster, p.cfg); err != nil {
		return err
	}
	p.importTokenMade = true
	return nil
}

// deployPending reports whether the agent has never been deployed or its
// redeployAgentGeneration was bumped since: the deploys that need a new
// import token, decided from the Cluster alone.
func deployPending(c *fleet.Cluster) bool {
	g := c.Status.AgentDeployedGeneration
	return c.Spec.KubeConfigSecret != "" && (g == nil || *g != c.Spec.RedeployAgentGeneration)
}

// deploy renders the agent with its bootstrap Secret and applies it to the
// downstream cluster under the fleet field manager. It removes the agent's
// old request credential before the namespaced objects, so the agent
// registers again with the fresh bootstrap Secret. It does not wait for the
// agent's pods: the agent's registration and heartbeat report those.
// rendered waits for the agent's objects the caller started rendering
// (nil: they are rendered here).
func (r *Reconciler) deploy(ctx context.Context, cluster *fleet.Cluster, values *agentvalues.Values, rendered func() ([]*unstructured.Unstructured, error), token string, kubeconfig []byte) (string, error) {
	host := "the downstream cluster"
	if rendered == nil {
		rendered = renderInBackground(r.Renderer, values)
	}
	objs, err := rendered()
	if err != nil {
		return host, &remote.InputError{Reason: fleet.RenderFailedReason, Err: err}
	}
	objs, err = renderer.InjectBootstrapToken(objs, token)
	if err != nil {
		return host, &remote.InputError{Reason: fleet.RenderFailedReason, Err: err}
	}
	rc, err := r.Remotes.Get(client.ObjectKeyFromObject(cluster), kubeconfig, r.Config.Get().InsecureKubeconfig)
	if err != nil {
		return host, err
	}
	host = rc.Host
	// Label the agent's objects as the agent's deployer labels what it
	// applies from Bundle fleet-agent-<cluster>, so its adoption of them
	// finds nothing to change.
	bundleObjs := make([]*unstructured.Unstructured, 0, len(objs))
	for i, o := range objs {
		objs[i] = o.DeepCopy()
		if o.GetKind() != "Secret" || o.GetName() != registration.BootstrapSecretName {
			bundleObjs = append(bundleObjs, objs[i])
		}
	}
	rc.Applier.SetOwnerLabels(bundleObjs, names.AgentBundle(cluster.Name), names.ClusterNamespace(cluster.Namespace, cluster.Name))
	// The cluster-scoped objects (the agent's ClusterRole and its binding)
	// need no namespace: they are applied beside it, not after it.
	var clusterScoped, namespaced []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetNamespace() == "" {
			clusterScoped = append(clusterScoped, o)
		} else {
			namespaced = append(namespaced, o)
		}
	}
	withSSA := func(ctx context.Context, o *unstructured.Unstructured) error {
		_, err := rc.Applier.Apply(ctx, o, ssa.DefaultApplyOptions())
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return applyAtOnce(gctx, withSSA, clusterScoped) })
	g.Go(func() error {
		made, err := prepareAgentNamespace(gctx, rc, values.Internal.SystemNamespace)
		if err != nil {
			return err
		}
		if made {
			// Nothing can be in a namespace this pass made: each object
			// is applied without ssa's read and dry run first.
			return applyAtOnce(gctx, func(ctx context.Context, o *unstructured.Unstructured) error {
				return apply.ApplyNew(ctx, rc.Client, o)
			}, namespaced)
		}
		return applyAtOnce(gctx, withSSA, namespaced)
	})
	return host, g.Wait()
}

// renderInBackground starts rendering the agent's objects for values and
// returns a function that waits for them.
func renderInBackground(ar *renderer.AgentRenderer, values *agentvalues.Values) func() ([]*unstructured.Unstructured, error) {
	var (
		objs []*unstructured.Unstructured
		err  error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var out *renderer.Output
		if out, err = ar.Render(values); err == nil {
			objs, err = out.Objects()
		}
	}()
	return func() ([]*unstructured.Unstructured, error) {
		<-done
		return objs, err
	}
}

// prepareAgentNamespace creates the agent's namespace, marked as fleet's,
// only when it does not exist (made), with one server-side apply: a
// namespace that was there before is never labelled, so deleting the
// Cluster never deletes it. In one that exists it removes the agent's old
// request credential, so the agent registers again with the new bootstrap
// Secret (a namespace just made holds none).
func prepareAgentNamespace(ctx context.Context, rc *remote.Client, name string) (made bool, err error) {
	err = rc.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
	switch {
	case apierrors.IsNotFound(err):
		return true, apply.ApplyNew(ctx, rc.Client, agentNamespaceObject(name))
	case err != nil:
		return false, err
	}
	cred := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: registration.AgentCredentialSecretName}}
	if err := rc.Client.Delete(ctx, cred); err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	return false, nil
}

// pushWriters is how many of the agent's objects each group of a push (the
// cluster-scoped ones, the namespaced ones) applies at once.
const pushWriters = 8

// applyAtOnce applies objs side by side with applyOne (fluxcd/pkg/ssa's
// Apply: read, server-side dry run, apply when it differs; or, in a
// namespace just made, apply.ApplyNew), so a push costs the round trips of
// about two objects, not three per object, and no wait for the namespace
// and cluster roles to be Current as ApplyAllStaged would (a poll of them).
// Only role bindings wait, for the roles: an identity that may not bind a
// role it does not hold ("bind" verb) has the API server check the role's
// rules, which must exist. Nothing else needs another object applied
// first: a pod waits for its ServiceAccount and Secrets.
func applyAtOnce(ctx context.Context, applyOne func(context.Context, *unstructured.Unstructured) error, objs []*unstructured.Unstructured) error {
	var roles, bindings, rest []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Role", "ClusterRole":
			roles = append(roles, o)
		case "RoleBinding", "ClusterRoleBinding":
			bindings = append(bindings, o)
		default:
			rest = append(rest, o)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pushWriters)
	g.Go(func() error {
		if err := applyEach(gctx, applyOne, roles); err != nil {
			return err
		}
		return applyEach(gctx, applyOne, bindings)
	})
	for _, o := range rest {
		g.Go(func() error { return applyOne(gctx, o) })
	}
	return g.Wait()
}

// applyEach applies objs side by side and returns when all are applied.
func applyEach(ctx context.Context, applyOne func(context.Context, *unstructured.Unstructured) error, objs []*unstructured.Unstructured) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, o := range objs {
		g.Go(func() error { return applyOne(gctx, o) })
	}
	return g.Wait()
}

// removeAgentDownstream deletes what deploy applied, when the downstream
// cluster still answers.
func (r *Reconciler) removeAgentDownstream(ctx context.Context, cluster *fleet.Cluster) error {
	cfg := r.Config.Get()
	in, err := r.readKubeconfig(ctx, cluster, cfg)
	if err != nil {
		return err
	}
	// Render with a bootstrap so the object list includes its Secret; the
	// URL only has to be non-empty.
	b := agentvalues.OfflineBootstrap(cluster)
	b.APIServerURL = "https://unused.invalid"
	values, err := agentvalues.ForCluster(cluster, cfg, b)
	if err != nil {
		return err
	}
	out, err := r.Renderer.Render(values)
	if err != nil {
		return err
	}
	objs, err := out.Objects()
	if err != nil {
		return err
	}
	rc, err := r.Remotes.Get(client.ObjectKeyFromObject(cluster), in.kubeconfig, cfg.InsecureKubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, restconfig.RequestTimeout)
	defer cancel()
	nsName := values.Internal.SystemNamespace
	del := []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: registration.AgentCredentialSecretName}}}
	for _, o := range objs {
		del = append(del, o)
	}
	ns := &corev1.Namespace{}
	if err := rc.Client.Get(ctx, client.ObjectKey{Name: nsName}, ns); err == nil && createdByFleet(ns) {
		del = append(del, ns)
	}
	// What the agent made at runtime, which goes with its namespace only
	// when fleet made that: its identity (key and recovery token), and
	// below its inventories, its direct endpoint's state and its
	// impersonators.
	del = append(del, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: registration.IdentitySecretName}})
	imp := &corev1.Namespace{}
	if err := rc.Client.Get(ctx, client.ObjectKey{Name: registration.ImpersonationNamespace}, imp); err == nil && imp.Labels[registration.ImpersonatorLabel] == "true" {
		del = append(del, imp)
	}
	var errs []error
	for _, o := range del {
		if err := rc.Client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, label := range []string{registration.InventoryLabel, registration.DirectLabel} {
		for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
			if err := rc.Client.DeleteAllOf(ctx, o, client.InNamespace(nsName), client.MatchingLabels{label: "true"}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, o := range []client.Object{&rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRole{}} {
		if err := rc.Client.DeleteAllOf(ctx, o, client.MatchingLabels{registration.ImpersonatorLabel: "true"}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// createdByFleet reports whether a downstream namespace was created by the
// push (only then it carries the managed label). Kubernetes' own namespaces
// are never deleted, whatever their labels say: an older version labelled
// a namespace that existed before the push.
func createdByFleet(ns *corev1.Namespace) bool {
	switch ns.Name {
	case metav1.NamespaceSystem, metav1.NamespacePublic, metav1.NamespaceDefault, "kube-node-lease":
		return false
	}
	return ns.Labels[fleet.ManagedLabel] == "true"
}

// agentNamespaceObject is the agent's namespace, applied before the chart's
// objects (the chart leaves namespace creation to helm --create-namespace).
func agentNamespaceObject(name string) *unstructured.Unstructured {
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	ns.SetLabels(map[string]string{fleet.ManagedLabel: "true"})
	return ns
}

// recordDeployed writes what the agent was given into the status.
func recordDeployed(cluster *fleet.Cluster, v *agentvalues.Values, valuesHash, serverHash string) {
	st := &cluster.Status
	st.AgentDeployedGeneration = ptr.To(cluster.Spec.RedeployAgentGeneration)
	st.AgentConfigChanged = false
	st.APIServerURL = v.APIServerURL
	st.APIServerCAHash = hashOf(v.APIServerCA)
	st.AgentTLSMode = v.AgentTLSMode
	st.AgentValuesHash = valuesHash
	st.KubeConfigServerHash = serverHash
	recordSettingHashes(cluster)
}

// recordSettingHashes records hashes of the per-cluster agent settings, as
// Fleet does, so tools can see which setting a deployed agent has.
func recordSettingHashes(cluster *fleet.Cluster) {
	st, spec := &cluster.Status, &cluster.Spec
	st.AgentEnvVarsHash = hashOf(spec.AgentEnvVars)
	st.AgentPrivateRepoURL = spec.PrivateRepoURL
	st.AgentHostNetwork = spec.HostNetwork != nil && *spec.HostNetwork
	st.AgentAffinityHash = hashOf(spec.AgentAffinity)
	st.AgentResourcesHash = hashOf(spec.AgentResources)
	st.AgentTolerationsHash = hashOf(spec.AgentTolerations)
	st.AgentSchedulingCustomizationHash = hashOf(spec.AgentSchedulingCustomization)
}

// hashOf is the sha256 of a value's JSON, or "" for an empty value.
func hashOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" || string(b) == `""` || string(b) == "[]" {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
