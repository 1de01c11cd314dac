package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/registration"
)

// register runs the handshake with the import identity of the bootstrap
// Secret: create a ClusterRegistration, wait (watching) for the credential
// Secret, keep the credential locally, forget the import token.
func (a *Agent) register(ctx context.Context) (*credential, error) {
	log := a.log
	b, err := readBootstrap(ctx, a.local, a.opts.Namespace)
	if err != nil {
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason, "%v", err)
	}
	if b == nil {
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason,
			"no working credential and no %s Secret in namespace %s: reinstall the agent with a ClusterRegistrationToken's values "+
				"(helm upgrade --install fleet-agent charts/fleet-agent -n %s -f values.yaml) or, for a manager-initiated cluster, "+
				"bump spec.redeployAgentGeneration of its Cluster upstream", registration.BootstrapSecretName, a.opts.Namespace, a.opts.Namespace)
	}
	cfg, err := a.readConfig(ctx)
	if err != nil {
		return nil, err
	}
	clientID := cfg.ClientID
	if clientID == "" {
		ks := &corev1.Namespace{}
		if err := a.local.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
			return nil, fmt.Errorf("reading namespace kube-system for the default clientID: %w", err)
		}
		clientID = string(ks.UID)
	}
	tokens := newTokenSource(b.Token)
	importCfg, err := upstreamConfig(ctx, b.APIServerURL, b.APIServerCA, cfg.AgentTLSMode, tokens, a.opts.SystemCAs)
	if err != nil {
		return nil, reconciler.Stall(fleet.NoBootstrapCredentialReason, "%v", err)
	}
	importClient, err := newUpstreamClient(importCfg)
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
	key, err := registration.NewCredentialKey()
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
			Namespace:   b.ClusterNamespace,
			Name:        "request-" + hex.EncodeToString(nameRandom),
			Labels:      map[string]string{fleet.RegistrationTokenLabel: b.TokenName},
			Annotations: map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)},
			// The controller's finalizer, set now: it spares the grant a
			// write (it removes what it made for the registration when the
			// registration goes).
			Finalizers: []string{registration.RegistrationFinalizer},
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: clientRandom, ClusterLabels: labels, CredentialPublicKey: key.PublicKey()},
	}
	if err := importClient.Create(ctx, reg); err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return nil, reconciler.Stall(fleet.CredentialRejectedReason,
				"the upstream refused the import token of ClusterRegistrationToken %s/%s (%v): it has expired or was deleted; "+
					"create a new token and reinstall the agent with its values", b.ClusterNamespace, b.TokenName, apierrors.ReasonForError(err))
		}
		return nil, fmt.Errorf("creating a ClusterRegistration upstream: %w", err)
	}
	log.Info("registration requested", "registration", reg.Namespace+"/"+reg.Name, "clientID", clientID)
	if err := a.step(ctx, "registration-created"); err != nil {
		return nil, err
	}

	clear := client.ObjectKey{Namespace: b.SystemRegistrationNamespace, Name: registration.CredentialSecretName(clientID, clientRandom)}
	granted, clearSecret, err := a.waitForGrant(ctx, importClient, client.ObjectKeyFromObject(reg), clear)
	if err != nil {
		return nil, fmt.Errorf("waiting for the upstream to grant registration %s/%s: %w (check its status: kubectl get clusterregistration -n %s %s -o yaml)",
			reg.Namespace, reg.Name, err, reg.Namespace, reg.Name)
	}
	cred, err := openCredential(granted, clearSecret, key)
	if err != nil {
		return nil, fmt.Errorf("the credential in the status of ClusterRegistration %s/%s: %w", reg.Namespace, reg.Name, err)
	}
	cred.APIServerURL, cred.APIServerCA, cred.TLSMode, cred.Issued = importCfg.Host, importCfg.CAData, cfg.AgentTLSMode, time.Now()
	if err := a.step(ctx, "credential-received"); err != nil {
		return nil, err
	}
	if err := writeCredential(ctx, a.local, a.opts.Namespace, cred); err != nil {
		return nil, fmt.Errorf("writing the local credential: %w", err)
	}
	if err := a.step(ctx, "credential-stored"); err != nil {
		return nil, err
	}
	// The credential is safe locally; the sealed copy upstream is useless
	// to anyone else and goes with the registration, one in the clear is
	// deleted now. Forget the import token.
	if clearSecret != nil {
		if err := importClient.Delete(ctx, clearSecret); err != nil && !apierrors.IsNotFound(err) {
			log.Info("could not delete the credential Secret upstream; the controller expires it", "error", err.Error())
		}
	}
	boot := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.opts.Namespace, Name: registration.BootstrapSecretName}}
	if err := a.local.Delete(ctx, boot); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("deleting the bootstrap Secret: %w", err)
	}
	if err := a.step(ctx, "bootstrap-deleted"); err != nil {
		return nil, err
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

// maxGrantPoll is the longest pause between two reads of the registration.
// A registration answered at once is read within milliseconds; one that
// waits behind a thousand others costs the upstream one GET per agent per
// pause, so the pause grows to a few seconds.
const maxGrantPoll = 5 * time.Second

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
func (a *Agent) waitForGrant(ctx context.Context, c client.Client, key, clear client.ObjectKey) (*fleet.ClusterRegistration, *corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RegistrationTimeout)
	defer cancel()
	delay := 20 * time.Millisecond
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
		case ctx.Err() != nil:
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return nil, nil, reconciler.Stall(fleet.CredentialRejectedReason,
				"the upstream does not let the import token read its registration (%v): upgrade the fleet controller to this agent's version, or create a new token and reinstall the agent with its values", apierrors.ReasonForError(err))
		case !apierrors.IsNotFound(err):
			a.log.V(1).Info("reading the registration", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("no answer within %s", a.opts.RegistrationTimeout)
		case <-time.After(delay):
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
		return nil, err
	}
	if raw := cm.Data[registration.AgentConfigKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), cfg); err != nil {
			return nil, reconciler.Stall(fleet.ConfigInvalidReason, "ConfigMap %s/%s key %s is not valid JSON: %v", a.opts.Namespace, registration.AgentConfigMapName, registration.AgentConfigKey, err)
		}
	}
	return cfg, nil
}

// step marks a point of the handshake; tests stop the agent there to prove
// a restart at any point converges.
func (a *Agent) step(ctx context.Context, name string) error {
	if a.stepHook != nil {
		a.stepHook(name)
	}
	return ctx.Err()
}
