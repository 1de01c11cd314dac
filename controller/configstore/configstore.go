// Package configstore keeps the controller configuration (the
// fleet-controller ConfigMap) current while the controller runs. A change is
// parsed, validated and published to the reconcilers that depend on it; an
// invalid document is reported (event, log, readiness check) and the last
// good configuration stays in force, so a typo never crash-loops the
// controller or reaches agents.
package configstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/gitops-fleet/fleet/internal/config"
)

// Store holds the current configuration.
type Store struct {
	key types.NamespacedName

	mu          sync.RWMutex
	cfg         *config.Config
	err         error
	known       bool
	subscribers []chan event.GenericEvent

	client   client.Client
	recorder recorder.EventRecorder
}

// New returns a Store for the ConfigMap namespace/name, starting from initial
// (nil: defaults).
func New(namespace, name string, initial *config.Config) *Store {
	if initial == nil {
		initial = &config.Config{}
	}
	return &Store{key: types.NamespacedName{Namespace: namespace, Name: name}, cfg: initial}
}

// Get returns the configuration in force. Callers must not modify it.
func (s *Store) Get() *config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

// Set replaces the configuration and notifies subscribers (tests and
// callers without a ConfigMap use it).
func (s *Store) Set(cfg *config.Config) {
	s.mu.Lock()
	s.cfg, s.err, s.known = cfg, nil, true
	subs := s.subscribers
	s.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- event.GenericEvent{Object: &corev1.ConfigMap{}}:
		default: // a change is already pending; one is enough
		}
	}
}

// Subscribe returns a channel that receives an event after every change.
// Call it before the manager starts.
func (s *Store) Subscribe() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1)
	s.mu.Lock()
	s.subscribers = append(s.subscribers, ch)
	s.mu.Unlock()
	return ch
}

// ReadyCheck fails while the ConfigMap holds an invalid document.
func (s *Store) ReadyCheck(_ *http.Request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.err != nil {
		return fmt.Errorf("ConfigMap %s is invalid, the last valid configuration stays in force: %w", s.key, s.err)
	}
	return nil
}

// SetupWithManager watches the ConfigMap.
func (s *Store) SetupWithManager(mgr ctrl.Manager) error {
	s.client = mgr.GetClient()
	s.recorder = mgr.GetEventRecorder("fleet-controller")
	isOurs := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == s.key.Namespace && o.GetName() == s.key.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("configstore").
		For(&corev1.ConfigMap{}, builder.WithPredicates(isOurs)).
		Complete(s)
}

// ErrNotKnown: the configuration in force may not be the ConfigMap's (it
// is invalid, so an earlier one or the defaults are in force).
var ErrNotKnown = errors.New("the controller configuration is not known yet")

// Known returns the configuration in force once it is known to be what
// the ConfigMap says: loaded from it, set, or the initial one because there
// is no ConfigMap. Until the watch delivered the ConfigMap it reads it
// (after the manager started: from the cache). While the ConfigMap is
// invalid it returns ErrNotKnown. For decisions a default must not make,
// such as making objects a person turned off.
func (s *Store) Known(ctx context.Context) (*config.Config, error) {
	s.mu.RLock()
	cfg, known := s.cfg, s.known
	s.mu.RUnlock()
	if known {
		return cfg, nil
	}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.known {
		return nil, fmt.Errorf("%w: ConfigMap %s: %w", ErrNotKnown, s.key, s.err)
	}
	return s.cfg, nil
}

// Reconcile loads the ConfigMap.
func (s *Store) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, s.load(ctx)
}

// load reads the ConfigMap and puts it in force when it is valid.
func (s *Store) load(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(ctx, s.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			// What is in force is all there is.
			s.mu.Lock()
			s.known = true
			s.mu.Unlock()
			log.Info("controller ConfigMap not found; keeping the configuration in force")
			return nil
		}
		return err
	}
	cfg, err := config.FromConfigMap(cm)
	if err != nil {
		s.mu.Lock()
		s.err, s.known = err, false
		s.mu.Unlock()
		log.Error(err, "invalid controller configuration; keeping the last valid one")
		s.recorder.Eventf(cm, nil, corev1.EventTypeWarning, "ConfigInvalid", "LoadConfig", "%s; the last valid configuration stays in force", err.Error())
		return nil
	}
	s.Set(cfg)
	log.Info("controller configuration loaded", "resourceVersion", cm.ResourceVersion)
	return nil
}
