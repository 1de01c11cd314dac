package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/connerr"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// registrar is the identity a registration is made with: the import
// identity of the bootstrap Secret, or the cluster's recovery identity.
type registrar struct {
	// what names it in messages.
	what string
	// url, ca, tlsMode and token reach the upstream as it.
	url, tlsMode, token string
	ca                  []byte
	// workspace is where the registration is made; labels say with what
	// (admission policy fleet-clusterregistration-token).
	workspace string
	labels    map[string]string
	// clearNamespace is where an upstream of an earlier release writes the
	// credential in the clear.
	clearNamespace string
	// bootstrap is set for the import identity: its Secret is deleted once
	// the credential is stored.
	bootstrap bool
	// recovery is set for the recovery identity: a refusal makes the agent
	// forget it.
	recovery bool
}

// register gets a new credential: with the import identity of the
// bootstrap Secret when there is one, else with the cluster's recovery
// identity when the agent holds a token of it that has not expired, else
// it is stuck and says what to do. Either way the registration is signed
// with the agent's identity key.
func (a *Agent) register(ctx context.Context, id *identity) (*credential, error) {
	// The bootstrap Secret and the ConfigMap, read side by side.
	var (
		b        *bootstrap
		bootErr  error
		bootRead sync.WaitGroup
	)
	bootRead.Add(1)
	go func() {
		defer bootRead.Done()
		b, bootErr = readBootstrap(ctx, a.local, a.opts.Namespace)
	}()
	cfg, err := a.readConfig(ctx)
	bootRead.Wait()
	if bootErr != nil {
		return nil, bootErr
	}
	if err != nil {
		return nil, err
	}
	var via registrar
	switch rec := id.recovery; {
	case b != nil:
		via = registrar{
			what: fmt.Sprintf("the import token of ClusterRegistrationToken %s/%s", b.ClusterNamespace, b.TokenName),
			url:  b.APIServerURL, ca: b.APIServerCA, tlsMode: cfg.AgentTLSMode, token: b.Token,
			workspace: b.ClusterNamespace, labels: map[string]string{fleet.RegistrationTokenLabel: b.TokenName},
			clearNamespace: b.SystemRegistrationNamespace, bootstrap: true,
		}
	case rec.usable(time.Now()):
		a.log.Info("no working credential and no bootstrap Secret: registering again with the cluster's recovery identity",
			"cluster", rec.ClusterNamespace+"/"+rec.ClusterName, "recoveryTokenExpires", rec.Expires.UTC().Format(time.RFC3339))
		mode := config.TLSModeStrict
		if len(rec.APIServerCA) == 0 {
			mode = config.TLSModeSystemStore
		}
		via = registrar{
			what: fmt.Sprintf("the recovery identity of Cluster %s/%s", rec.ClusterNamespace, rec.ClusterName),
			url:  rec.APIServerURL, ca: rec.APIServerCA, tlsMode: mode, token: rec.Token,
			workspace: rec.ClusterNamespace, labels: map[string]string{fleet.RecoveryNamespaceLabel: rec.DeploymentNamespace},
			clearNamespace: config.DefaultSystemRegistrationNS, recovery: true,
		}
	default:
		expired := ""
		if rec != nil {
			expired = fmt.Sprintf(" (its recovery token for Cluster %s/%s expired at %s)", rec.ClusterNamespace, rec.ClusterName, rec.Expires.UTC().Format(time.RFC3339))
		}
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason,
			"no working credential, no %s Secret in namespace %s and no usable recovery token%s: reinstall the agent with a ClusterRegistrationToken's values "+
				"(helm upgrade --install fleet-agent charts/fleet-agent -n %s -f values.yaml; a token with spec.clientID set to this cluster's clientID re-registers its Cluster) or, for a manager-initiated cluster, "+
				"bump spec.redeployAgentGeneration of its Cluster upstream", registration.BootstrapSecretName, a.opts.Namespace, expired, a.opts.Namespace)
	}
	return a.registerWith(ctx, id.key, cfg, via)
}

// registerWith runs the handshake as via: create a ClusterRegistration
// signed with the identity key, wait for the controller's answer, keep the
// credential locally, and forget the import token.
func (a *Agent) registerWith(ctx context.Context, key *registration.IdentityKey, cfg *registration.AgentConfig, via registrar) (*credential, error) {
	log := a.log
	clientID := cfg.ClientID
	if clientID == "" {
		ks := &corev1.Namespace{}
		if err := a.local.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
			return nil, localFault(err, "reading namespace kube-system for the default clientID")
		}
		clientID = string(ks.UID)
	}
	tokens := newTokenSource(via.token)
	upCfg, err := upstreamConfig(ctx, via.url, via.ca, via.tlsMode, tokens, a.opts.SystemCAs)
	if err != nil {
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason, "%v", err)
	}
	upClient, err := newUpstreamClient(upCfg)
	if err != nil {
		return nil, err
	}

	random := make([]byte, 24)
	if _, err := rand.Read(random); err != nil {
		return nil, err
	}
	clientRandom := hex.EncodeToString(random)
	// The credential comes back sealed to this key, which never leaves
	// this process: a restart registers again with a new one.
	credKey, err := registration.NewCredentialKey()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	labels[fleet.CreatedByAgentPodLabel] = a.opts.PodName
	// The registration's name is random and known only to this agent: the
	// import identity may get any registration of its namespace by name
	// (no list, no watch), and this one carries the answer.
	nameRandom := make([]byte, 16)
	if _, err := rand.Read(nameRandom); err != nil {
		return nil, err
	}
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   via.workspace,
			Name:        "request-" + hex.EncodeToString(nameRandom),
			Labels:      via.labels,
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)},
			// The controller's finalizer, set now: it spares the grant a
			// write (it removes what it made for the registration when the
			// registration goes).
			Finalizers: []string{registration.RegistrationFinalizer},
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: clientRandom, ClusterLabels: labels, CredentialPublicKey: credKey.PublicKey()},
	}
	if err := key.Sign(reg); err != nil {
		return nil, err
	}
	took, err := a.createRegistration(ctx, upClient, reg)
	if err != nil {
		switch {
		case via.recovery && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)):
			if apierrors.IsUnauthorized(err) {
				// The recovery ServiceAccount is gone (its Cluster was
				// deleted, or its namespace): this token never works
				// again. Forbidden is kept: the controller makes a
				// deleted RoleBinding again.
				a.forgetRecovery(ctx, "the upstream does not know the recovery identity")
			}
			return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason,
				"no working credential and no %s Secret in namespace %s, and the upstream refused %s (%v): the Cluster was deleted, or its recovery identity removed; "+
					"reinstall the agent with a ClusterRegistrationToken's values (helm upgrade --install fleet-agent charts/fleet-agent -n %s -f values.yaml)",
				registration.BootstrapSecretName, a.opts.Namespace, via.what, apierrors.ReasonForError(err), a.opts.Namespace)
		case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
			return nil, reconciler.Stall(fleet.CredentialRejectedReason,
				"the upstream refused %s (%v): it has expired or was deleted; create a new token and reinstall the agent with its values", via.what, apierrors.ReasonForError(err))
		}
		return nil, upstreamFault(err, upCfg.Host, "creating a ClusterRegistration upstream with "+via.what)
	}
	log.Info("registration requested", "registration", reg.Namespace+"/"+reg.Name, "clientID", clientID, "with", via.what)

	clear := client.ObjectKey{Namespace: via.clearNamespace, Name: registration.CredentialSecretName(clientID, clientRandom)}
	granted, clearSecret, err := a.waitForGrant(ctx, upClient, client.ObjectKeyFromObject(reg), clear, took)
	if err != nil {
		var refused *reconciler.Stalled
		if via.recovery && errors.As(err, &refused) {
			a.forgetRecovery(ctx, "the upstream refused a registration made with it: "+refused.Reason)
		}
		return nil, fmt.Errorf("waiting for the upstream to grant registration %s/%s: %w (check its status: kubectl get clusterregistration -n %s %s -o yaml)",
			reg.Namespace, reg.Name, err, reg.Namespace, reg.Name)
	}
	cred, err := openCredential(granted, clearSecret, credKey)
	if err != nil {
		return nil, fmt.Errorf("the credential in the status of ClusterRegistration %s/%s: %w", reg.Namespace, reg.Name, err)
	}
	cred.APIServerURL, cred.APIServerCA, cred.TLSMode, cred.Issued = upCfg.Host, upCfg.CAData, via.tlsMode, time.Now()
	if err := writeCredential(ctx, a.local, a.opts.Namespace, cred); err != nil {
		return nil, fmt.Errorf("writing the local credential: %w", err)
	}
	a.stored.fire()
	// The credential is safe locally; the sealed copy upstream is useless
	// to anyone else and goes with the registration, one in the clear is
	// deleted now. Forget the import token.
	if clearSecret != nil {
		if err := upClient.Delete(ctx, clearSecret); err != nil && !apierrors.IsNotFound(err) {
			log.Error(err, "could not delete the credential Secret upstream; the controller expires it")
		}
	}
	if via.bootstrap {
		a.mu.Lock()
		a.spent = sha256.Sum256([]byte(via.token))
		a.mu.Unlock()
		boot := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.opts.Namespace, Name: registration.BootstrapSecretName}}
		if err := a.local.Delete(ctx, boot); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting the bootstrap Secret: %w", err)
		}
	}
	log.Info("registered", "cluster", cred.ClusterNamespace+"/"+cred.ClusterName, "clusterNamespace", cred.DeploymentNamespace)
	return cred, nil
}

// openCredential opens the credential the controller sealed to key in
// the status of the registration it answered, or reads the one it wrote
// in the clear (clear not nil).
func openCredential(reg *fleet.ClusterRegistration, clear *corev1.Secret, key *registration.CredentialKey) (*credential, error) {
	var c *registration.SealedCredential
	if clear != nil {
		c = registration.CredentialFromSecretData(clear.Data)
	} else {
		var err error
		if c, err = key.Open(reg.Status.Credential, reg.Namespace, reg.Name, string(reg.UID)); err != nil {
			return nil, err
		}
	}
	if c.Token == "" || c.ClusterName == "" || c.DeploymentNamespace == "" {
		return nil, errors.New("it is incomplete")
	}
	cred := &credential{
		Token:               c.Token,
		ClusterNamespace:    c.ClusterNamespace,
		ClusterName:         c.ClusterName,
		DeploymentNamespace: c.DeploymentNamespace,
		ServiceAccount:      c.ServiceAccount,
	}
	cred.Expires, _ = time.Parse(time.RFC3339, c.Expires)
	return cred, nil
}

// createRegistration creates reg, and again with the same name when the
// upstream did not answer (a timeout, a connection error, 429, 503): the
// first request may have been written all the same, and its name, random
// and known only to this agent, makes an AlreadyExists the proof that it
// was. A new registration per try would leave the controller one to grant
// in vain for each. It gives up after RegistrationTimeout.
// It returns how long the create that succeeded took: the upstream's
// load, which sets the first pause of the wait for the answer.
func (a *Agent) createRegistration(ctx context.Context, c client.Client, reg *fleet.ClusterRegistration) (time.Duration, error) {
	deadline := time.Now().Add(a.opts.RegistrationTimeout)
	pause := time.Second
	for {
		start := time.Now()
		err := c.Create(ctx, reg.DeepCopy())
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return time.Since(start), nil
		case ctx.Err() != nil || !noAnswer(err) || time.Now().After(deadline):
			return 0, err
		}
		a.log.V(1).Info("creating the registration again, with the same name", "registration", reg.Namespace+"/"+reg.Name, "error", err.Error())
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause + time.Duration(mathrand.Int64N(int64(pause/2))) - pause/4):
		}
		pause = min(2*pause, maxGrantPoll)
	}
}

// noAnswer reports whether err says nothing about the request's fate: no
// response (a timeout, a connection error; connerr.IsUnreachable) or the
// upstream too busy to decide (429, a server timeout). A failed TLS check
// is an answer of sorts: the same request fails the same way, so it is
// reported at once.
func noAnswer(err error) bool {
	return (connerr.IsUnreachable(err) && !connerr.IsTLS(err)) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err)
}

// maxGrantPoll is the longest pause between two reads of the registration.
// A registration answered at once is read within milliseconds; one that
// waits behind thousands of others costs the upstream one GET per agent per
// pause, so the pause grows (by half each time: past a second after about
// 13 s of waiting, at this cap after about 80 s) and, past a second, varies
// by a quarter either way so a crowd that started together does not ask
// together. With 10,000 agents registering at once, a cap of 5 s was 2,000
// GETs/s, which left the upstream API server no CPU for the grants.
const maxGrantPoll = 30 * time.Second

// waitForGrant waits for the controller's answer to the registration: its
// status with the sealed credential, or a refusal. The import identity may
// get a registration by its name, and only get (no list, no watch: the
// names keep one agent's registration from another), so it asks again
// with a growing pause. A refusal (the registration is stalled: the token
// expired, the cluster is registered and online, ...) ends the wait with
// the controller's message. A registration granted without a sealed
// credential (its spec.credentialPublicKey was dropped: CRDs older than
// the agent) is answered in the clear, in the Secret named clear, which
// its Role lets the import identity read.
//
// The first pause is the time the create took, at least 20 ms: a few
// milliseconds on an upstream at rest, seconds when thousands of agents
// register at once and each early read would only find no answer yet. An
// upstream too busy to answer a read (429, a timeout) doubles the pause.
func (a *Agent) waitForGrant(ctx context.Context, c client.Client, key, clear client.ObjectKey, created time.Duration) (*fleet.ClusterRegistration, *corev1.Secret, error) {
	delay := min(max(20*time.Millisecond, created), maxGrantPoll)
	deadline := time.Now().Add(a.opts.RegistrationTimeout)
	for {
		reg := &fleet.ClusterRegistration{}
		// From the API server's watch cache: cheap for it, and an answer
		// not there yet is asked for again anyway.
		err := c.Get(ctx, key, reg, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
		switch {
		case err == nil && len(reg.Status.Credential) > 0:
			return reg, nil, nil
		case err == nil && reg.Status.Granted:
			s := &corev1.Secret{}
			if err := c.Get(ctx, clear, s); err == nil && len(s.Data[registration.KeyToken]) > 0 {
				return reg, s, nil
			} else if err != nil {
				a.log.V(1).Info("reading the credential Secret of a registration granted in the clear", "error", err.Error())
			}
		case err == nil:
			if s := meta.FindStatusCondition(reg.Status.Conditions, fleet.StalledCondition); s != nil && s.Status == metav1.ConditionTrue {
				return nil, nil, reconciler.Stall(s.Reason, "the upstream refused registration %s/%s: %s", key.Namespace, key.Name, s.Message)
			}
			// Still there and not refused: the controller is behind (many
			// registrations at once) or down. A new request would only
			// queue behind this one and leave it for the controller to
			// grant in vain, so the agent keeps waiting.
			if time.Now().After(deadline) {
				a.log.Info("still waiting for the upstream to answer the registration", "registration", key.String(), "waited", a.opts.RegistrationTimeout.String())
				deadline = time.Now().Add(a.opts.RegistrationTimeout)
			}
		case ctx.Err() != nil:
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return nil, nil, reconciler.Stall(fleet.CredentialRejectedReason,
				"the upstream does not let the import token read its registration (%v): upgrade the fleet controller to this agent's version, or create a new token and reinstall the agent with its values", apierrors.ReasonForError(err))
		case noAnswer(err):
			delay = min(2*delay, maxGrantPoll)
			a.log.V(1).Info("reading the registration", "error", err.Error())
		case !apierrors.IsNotFound(err):
			a.log.V(1).Info("reading the registration", "error", err.Error())
		}
		if err != nil && time.Now().After(deadline) {
			// Gone (NotFound) or unreadable for the whole timeout: ask again.
			return nil, nil, fmt.Errorf("no answer within %s (last: %v)", a.opts.RegistrationTimeout, err)
		}
		pause := delay
		if pause > time.Second {
			pause += time.Duration(mathrand.Int64N(int64(pause/2))) - pause/4
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(pause):
		}
		delay = min(delay*3/2, maxGrantPoll)
	}
}

func (a *Agent) readConfig(ctx context.Context) (*registration.AgentConfig, error) {
	cm := &corev1.ConfigMap{}
	cfg := &registration.AgentConfig{}
	if err := a.local.Get(ctx, client.ObjectKey{Namespace: a.opts.Namespace, Name: registration.AgentConfigMapName}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return cfg, nil
		}
		return nil, localFault(err, "reading the agent's ConfigMap "+a.opts.Namespace+"/"+registration.AgentConfigMapName)
	}
	if raw := cm.Data[registration.AgentConfigKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), cfg); err != nil {
			return nil, reconciler.Stall(fleet.ConfigInvalidReason, "ConfigMap %s/%s key %s is not valid JSON: %v", a.opts.Namespace, registration.AgentConfigMapName, registration.AgentConfigKey, err)
		}
	}
	return cfg, nil
}
