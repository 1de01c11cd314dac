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
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    b.ClusterNamespace,
			GenerateName: "request-",
			Labels:       map[string]string{fleet.RegistrationTokenLabel: b.TokenName},
			Annotations:  map[string]string{registration.RequestedAtAnnotation: time.Now().UTC().Format(time.RFC3339Nano)},
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

	secretName := registration.CredentialSecretName(clientID, clientRandom)
	secret, err := a.waitForCredentialSecret(ctx, importClient, b.SystemRegistrationNamespace, secretName)
	if err != nil {
		return nil, fmt.Errorf("waiting for the upstream to grant registration %s/%s: %w (check its status: kubectl get clusterregistration -n %s %s -o yaml)",
			reg.Namespace, reg.Name, err, reg.Namespace, reg.Name)
	}
	cred, err := openCredential(secret, key, reg)
	if err != nil {
		return nil, fmt.Errorf("credential Secret %s/%s: %w", b.SystemRegistrationNamespace, secretName, err)
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
	// The credential is safe locally. A sealed copy upstream is useless to
	// anyone else and goes with the registration; one in the clear (an
	// older controller's) is dropped now. Then forget the import token.
	if len(secret.Data[registration.KeySealed]) == 0 {
		if err := importClient.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
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

// openCredential reads the credential out of the Secret the controller
// answered with: sealed to key for reg, or, from an older controller, in
// the clear.
func openCredential(secret *corev1.Secret, key *registration.CredentialKey, reg *fleet.ClusterRegistration) (*credential, error) {
	c := &registration.SealedCredential{
		Token:               string(secret.Data[registration.KeyToken]),
		ClusterNamespace:    string(secret.Data[registration.KeyClusterNamespace]),
		ClusterName:         string(secret.Data[registration.KeyClusterName]),
		DeploymentNamespace: string(secret.Data[registration.KeyDeploymentNamespace]),
		ServiceAccount:      string(secret.Data[registration.KeyServiceAccount]),
		Expires:             string(secret.Data[registration.KeyExpires]),
	}
	if box := secret.Data[registration.KeySealed]; len(box) > 0 {
		var err error
		if c, err = key.Open(box, reg.Namespace, reg.Name, string(reg.UID)); err != nil {
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

// waitForCredentialSecret waits for the one Secret the registration will be
// answered with. The import identity may get a Secret in the system
// registration namespace by its name, and only get (no list, no watch: the
// names are what keeps one agent's credential from another), so it asks
// again with a growing pause. A 403 (an older controller grants the right
// to read it only once it has seen the registration) is asked again the
// same way.
func (a *Agent) waitForCredentialSecret(ctx context.Context, c client.Client, ns, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RegistrationTimeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		s := &corev1.Secret{}
		// From the API server's watch cache: cheap for it, and a Secret
		// that is not there yet is asked for again anyway.
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
		if err == nil && (len(s.Data[registration.KeySealed]) > 0 || len(s.Data[registration.KeyToken]) > 0) {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer within %s", a.opts.RegistrationTimeout)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			a.log.V(1).Info("reading the credential Secret", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer within %s", a.opts.RegistrationTimeout)
		case <-time.After(delay):
		}
		delay = min(delay*3/2, 2*time.Second)
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
