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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
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
		},
		Spec: fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: clientRandom, ClusterLabels: labels},
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
	cred := &credential{
		APIServerURL:        importCfg.Host,
		APIServerCA:         importCfg.CAData,
		TLSMode:             cfg.AgentTLSMode,
		Token:               string(secret.Data[registration.KeyToken]),
		ClusterNamespace:    string(secret.Data[registration.KeyClusterNamespace]),
		ClusterName:         string(secret.Data[registration.KeyClusterName]),
		DeploymentNamespace: string(secret.Data[registration.KeyDeploymentNamespace]),
		ServiceAccount:      string(secret.Data[registration.KeyServiceAccount]),
		Issued:              time.Now(),
	}
	cred.Expires, _ = time.Parse(time.RFC3339, string(secret.Data[registration.KeyExpires]))
	if cred.Token == "" || cred.ClusterName == "" || cred.DeploymentNamespace == "" {
		return nil, fmt.Errorf("credential Secret %s/%s is incomplete", b.SystemRegistrationNamespace, secretName)
	}
	if err := a.step(ctx, "credential-received"); err != nil {
		return nil, err
	}
	if err := writeCredential(ctx, a.local, a.opts.Namespace, cred); err != nil {
		return nil, fmt.Errorf("writing the local credential: %w", err)
	}
	if err := a.step(ctx, "credential-stored"); err != nil {
		return nil, err
	}
	// The credential is safe locally: drop the handed-back copy upstream and
	// forget the import token.
	if err := importClient.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		log.Info("could not delete the credential Secret upstream; the controller expires it", "error", err.Error())
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

// waitForCredentialSecret watches the one Secret the registration will be
// answered with. The import identity may read only that Secret, and only
// once the controller has seen the registration: until then the watch is
// refused and retried quickly.
func (a *Agent) waitForCredentialSecret(ctx context.Context, c client.WithWatch, ns, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RegistrationTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	for {
		s, err := a.watchOnce(ctx, c, ns, name)
		if s != nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer within %s", a.opts.RegistrationTimeout)
		}
		if err != nil && !apierrors.IsForbidden(err) {
			a.log.V(1).Info("watching the credential Secret", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer within %s", a.opts.RegistrationTimeout)
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// watchOnce lists then watches the named Secret until it exists with data.
func (a *Agent) watchOnce(ctx context.Context, c client.WithWatch, ns, name string) (*corev1.Secret, error) {
	sel := client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(ns), sel); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if len(list.Items[i].Data[registration.KeyToken]) > 0 {
			return &list.Items[i], nil
		}
	}
	w, err := c.Watch(ctx, &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: list.ResourceVersion}}, client.InNamespace(ns), sel)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("watch closed")
			}
			if ev.Type == watch.Error {
				return nil, apierrors.FromObject(ev.Object)
			}
			if s, ok := ev.Object.(*corev1.Secret); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) && len(s.Data[registration.KeyToken]) > 0 {
				return s, nil
			}
		}
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
