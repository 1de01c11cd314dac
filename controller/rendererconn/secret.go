// Package rendererconn is how the controller reaches the renderer
// (internal/renderservice): it keeps Secret fleet-renderer-tls in the
// controller's namespace, the renderer's serving certificate and the bearer
// token only the controller sends it (Keeper), and finds the renderer's
// pods through its Service's EndpointSlices (Endpoints). The controller
// makes the Secret when missing and renews the certificate before it
// expires or when the renderer's address changes; the renderer mounts the
// certificate, its key and the token's hash as files and never reads the
// API.
package rendererconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/internal/reconciler"
	"github.com/gitops-fleet/fleet/internal/renderservice"
)

const (
	// cacheFor is how long credentials read from the Secret are used
	// without reading it again (unless the renderer refuses them).
	cacheFor = time.Minute
	// checkEvery is how often the leader checks the certificate while it
	// runs.
	checkEvery = time.Hour
)

// Keeper keeps the Secret and gives the controller's renderservice.Client
// its credentials. As a manager Runnable (leader only) it makes the Secret
// at start, so the renderer's pod, which mounts it, can start before any
// Bundle renders.
type Keeper struct {
	// Client writes the Secret; Reader reads it from the API server
	// (Secrets are not in the controller's cache).
	Client client.Client
	Reader client.Reader
	// Namespace and Name locate the Secret (Name zero:
	// renderservice.SecretName).
	Namespace, Name string
	// Host is the renderer's address the certificate must cover.
	Host string

	mu      sync.Mutex
	cached  *renderservice.Credentials
	readAt  time.Time
	refused bool
}

var _ renderservice.CredentialSource = &Keeper{}

func (k *Keeper) key() client.ObjectKey {
	name := k.Name
	if name == "" {
		name = renderservice.SecretName
	}
	return client.ObjectKey{Namespace: k.Namespace, Name: name}
}

// Start makes or renews the Secret now and every checkEvery until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("secret", k.key().String())
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 8, Cap: time.Minute}
	for {
		delay := checkEvery
		if _, err := k.ensure(ctx); err != nil {
			log.Error(err, "keeping the renderer's credentials")
			delay = backoff.Step()
		} else {
			backoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 8, Cap: time.Minute}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// Credentials returns the credentials, read from the Secret at most once a
// minute, or at once after Refused; it makes or renews the Secret when
// needed.
func (k *Keeper) Credentials(ctx context.Context) (*renderservice.Credentials, error) {
	k.mu.Lock()
	if k.cached != nil && !k.refused && time.Since(k.readAt) < cacheFor {
		c := k.cached
		k.mu.Unlock()
		return c, nil
	}
	k.mu.Unlock()
	return k.ensure(ctx)
}

// Refused makes the next Credentials read the Secret again.
func (k *Keeper) Refused() {
	k.mu.Lock()
	k.refused = true
	k.mu.Unlock()
}

// ensure reads the Secret; makes it when missing, makes it again when it
// cannot be read, renews the certificate when it needs renewing.
func (k *Keeper) ensure(ctx context.Context) (*renderservice.Credentials, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("secret", k.key().String())
	s := &corev1.Secret{}
	err := k.Reader.Get(ctx, k.key(), s)
	if apierrors.IsNotFound(err) {
		creds, err := renderservice.NewCredentials(k.Host)
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.key().Namespace, Name: k.key().Name, Labels: map[string]string{
				"app.kubernetes.io/name": "fleet-renderer", "app.kubernetes.io/part-of": "fleet", "app.kubernetes.io/managed-by": "fleet-controller",
			}},
			Type: corev1.SecretTypeOpaque,
			Data: creds.SecretData(),
		}
		err = k.Client.Create(ctx, s, client.FieldOwner(reconciler.FieldManager))
		if err == nil {
			log.Info("made the renderer's credentials", "host", k.Host)
			return k.remember(creds), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("making Secret %s: %w", k.key(), err)
		}
		// Another controller replica or shard made it first.
		err = k.Reader.Get(ctx, k.key(), s)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", k.key(), err)
	}
	creds, err := renderservice.CredentialsFromSecretData(s.Data)
	why := ""
	switch {
	case err != nil:
		// Broken (edited by hand): start again, with a new token.
		why = err.Error()
		if creds, err = renderservice.NewCredentials(k.Host); err != nil {
			return nil, err
		}
	default:
		if why = creds.Renewal(k.Host, time.Now()); why != "" {
			if err := creds.RenewCertificate(k.Host, time.Now()); err != nil {
				return nil, err
			}
		}
	}
	if why != "" {
		s.Data = creds.SecretData()
		// resourceVersion guards against a replica renewing at the same
		// time: the loser reads the winner's next time.
		if err := k.Client.Update(ctx, s, client.FieldOwner(reconciler.FieldManager)); err != nil {
			return nil, fmt.Errorf("renewing Secret %s (%s): %w", k.key(), why, err)
		}
		log.Info("renewed the renderer's credentials", "why", why, "host", k.Host)
	}
	return k.remember(creds), nil
}

func (k *Keeper) remember(c *renderservice.Credentials) *renderservice.Credentials {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cached, k.readAt, k.refused = c, time.Now(), false
	return c
}
