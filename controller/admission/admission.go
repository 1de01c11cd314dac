// Package admission checks that fleet's admission policies are in force. The
// grant trusts what they enforce (a registration's token label names the
// token whose import identity made it; only admins register without a token;
// only approvers approve), so without them it must grant nothing. The
// Checker watches every ValidatingAdmissionPolicy and
// ValidatingAdmissionPolicyBinding that kustomize/base/policies ships
// (embedded, so a policy file added there is checked without further code),
// compares the installed spec with the shipped one, and reports what is
// missing or differs: to the registration reconciler (Problem), on /readyz
// (ReadyCheck), in an event and in the log.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/kustomize/base/policies"
)

// DefaultResync is how often the installed policies are compared again even
// when no watch event came.
const DefaultResync = time.Minute

// InstalledEventReason: the policies are in force again.
const InstalledEventReason = "AdmissionPoliciesInstalled"

// install says how to fix a missing or changed policy.
const install = "install them as shipped: helm upgrade fleet charts/fleet, or kubectl apply --server-side -k kustomize/base"

// Checker knows whether fleet's admission policies and their bindings are
// installed as shipped. It runs on every replica (readiness), not only on
// the leader.
type Checker struct {
	cache       cache.Cache
	recorder    recorder.EventRecorder
	regarding   runtime.Object
	resync      time.Duration
	unreadAfter time.Duration
	want        []policies.Object

	poke chan struct{}

	mu          sync.RWMutex
	checked     bool
	problem     string
	subscribers []chan event.GenericEvent
}

// DefaultUnreadAfter is how long the first check may wait for the lists of
// policies before the controller says it cannot read them.
const DefaultUnreadAfter = 30 * time.Second

// Options configure a Checker.
type Options struct {
	// Recorder records the events; nil records none.
	Recorder recorder.EventRecorder
	// Regarding is the object events are about (the controller's
	// ConfigMap).
	Regarding runtime.Object
	// Resync is how often to compare without a watch event (zero:
	// DefaultResync).
	Resync time.Duration
	// UnreadAfter is how long to wait for the first lists of policies
	// before reporting that they cannot be read (zero: DefaultUnreadAfter).
	UnreadAfter time.Duration
}

// New returns a Checker that reads the policies from c (the manager's
// cache). Add it to the manager: mgr.Add(checker).
func New(c cache.Cache, opts Options) (*Checker, error) {
	want, err := policies.Objects()
	if err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return nil, errors.New("no admission policies embedded from kustomize/base/policies")
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.UnreadAfter <= 0 {
		opts.UnreadAfter = DefaultUnreadAfter
	}
	return &Checker{
		cache: c, recorder: opts.Recorder, regarding: opts.Regarding, resync: opts.Resync, unreadAfter: opts.UnreadAfter, want: want,
		poke:    make(chan struct{}, 1),
		problem: "the controller has not yet read the installed admission policies (its ClusterRole needs get, list and watch on validatingadmissionpolicies and validatingadmissionpolicybindings)",
	}, nil
}

// NeedLeaderElection is false: every replica reports its readiness.
func (c *Checker) NeedLeaderElection() bool { return false }

// Problem returns what is missing or differs, naming each policy and
// binding, or "" when all are installed as shipped.
func (c *Checker) Problem() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.problem
}

// Checked reports whether the installed policies were compared at least
// once: until then Problem says only that they were not read yet, which a
// controller that just started should not report on every registration.
func (c *Checker) Checked() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.checked
}

// ReadyCheck fails while Problem is not empty.
func (c *Checker) ReadyCheck(_ *http.Request) error {
	if p := c.Problem(); p != "" {
		return fmt.Errorf("%s: no registration is granted", p)
	}
	return nil
}

// Subscribe returns a channel that receives an event after every change of
// Problem. Call it before the manager starts.
func (c *Checker) Subscribe() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1)
	c.mu.Lock()
	c.subscribers = append(c.subscribers, ch)
	c.mu.Unlock()
	return ch
}

// Start watches the policies and bindings and compares them on every change
// and every resync interval, until ctx ends.
func (c *Checker) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("admission-policies")
	var synced []toolscache.InformerSynced
	for _, obj := range []client.Object{&admissionv1.ValidatingAdmissionPolicy{}, &admissionv1.ValidatingAdmissionPolicyBinding{}} {
		inf, err := c.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.trigger() },
			UpdateFunc: func(any, any) { c.trigger() },
			DeleteFunc: func(any) { c.trigger() },
		}); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	// Until both lists arrived, the problem stays "not read yet": a
	// controller without the RBAC to read them never grants, and says so.
	unread := time.AfterFunc(c.unreadAfter, func() {
		c.publish(log, fmt.Sprintf("fleet's admission policies could not be read within %s: the controller's ClusterRole needs get, list and watch on validatingadmissionpolicies and validatingadmissionpolicybindings", c.unreadAfter), true)
	})
	ok := toolscache.WaitForCacheSync(ctx.Done(), synced...)
	unread.Stop()
	if !ok {
		return nil
	}
	tick := time.NewTicker(c.resync)
	defer tick.Stop()
	for {
		c.check(ctx, log)
		select {
		case <-ctx.Done():
			return nil
		case <-c.poke:
		case <-tick.C:
		}
	}
}

func (c *Checker) trigger() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// check compares and publishes a change.
func (c *Checker) check(ctx context.Context, log logr.Logger) {
	vaps := &admissionv1.ValidatingAdmissionPolicyList{}
	bindings := &admissionv1.ValidatingAdmissionPolicyBindingList{}
	var problem string
	if err := c.cache.List(ctx, vaps); err != nil {
		problem = fmt.Sprintf("listing ValidatingAdmissionPolicies failed: %v", err)
	} else if err := c.cache.List(ctx, bindings); err != nil {
		problem = fmt.Sprintf("listing ValidatingAdmissionPolicyBindings failed: %v", err)
	} else {
		installed := map[string]any{}
		for i := range vaps.Items {
			if vaps.Items[i].DeletionTimestamp.IsZero() {
				installed[policies.KindPolicy+"/"+vaps.Items[i].Name] = vaps.Items[i].Spec
			}
		}
		for i := range bindings.Items {
			if bindings.Items[i].DeletionTimestamp.IsZero() {
				installed[policies.KindBinding+"/"+bindings.Items[i].Name] = bindings.Items[i].Spec
			}
		}
		problem = Compare(c.want, installed)
	}

	c.publish(log, problem, false)
}

// publish records the outcome of a check; a change is logged, recorded as
// an event and sent to the subscribers. With unreadOnly set it does so only
// while no check has completed.
func (c *Checker) publish(log logr.Logger, problem string, unreadOnly bool) {
	c.mu.Lock()
	if unreadOnly && c.checked {
		c.mu.Unlock()
		return
	}
	changed := problem != c.problem || !c.checked
	c.problem, c.checked = problem, true
	subs := c.subscribers
	c.mu.Unlock()
	if !changed {
		return
	}
	if problem != "" {
		log.Error(errors.New(problem), "fleet's admission policies are not in force; no registration is granted until they are")
		c.event(corev1.EventTypeWarning, fleet.AdmissionPoliciesMissingReason, "%s: no registration is granted until they are: %s", problem, install)
	} else {
		log.Info("fleet's admission policies are installed as shipped", "count", len(c.want))
		c.event(corev1.EventTypeNormal, InstalledEventReason, "the %d admission policies and bindings fleet ships are installed: registrations are granted", len(c.want))
	}
	for _, ch := range subs {
		select {
		case ch <- event.GenericEvent{Object: &admissionv1.ValidatingAdmissionPolicy{}}:
		default:
		}
	}
}

func (c *Checker) event(eventType, reason, note string, args ...any) {
	if c.recorder != nil && c.regarding != nil {
		c.recorder.Eventf(c.regarding, nil, eventType, reason, "CheckAdmissionPolicies", note, args...)
	}
}

// Compare reports, in one message, which of the shipped objects are missing
// from installed (keyed "Kind/name", values their typed or untyped spec) or
// differ from how they were shipped; "" when none.
func Compare(want []policies.Object, installed map[string]any) string {
	var missing, differ []string
	for _, w := range want {
		got, ok := installed[w.String()]
		if !ok {
			missing = append(missing, w.Kind+" "+w.Name)
			continue
		}
		if path, same := covers(normalize(w.Spec), normalize(got), "spec"); !same {
			differ = append(differ, fmt.Sprintf("%s %s (%s)", w.Kind, w.Name, path))
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "not installed: "+strings.Join(missing, ", "))
	}
	if len(differ) > 0 {
		parts = append(parts, "changed from what fleet ships: "+strings.Join(differ, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "fleet's admission policies are " + strings.Join(parts, "; ") + "; " + install
}

// normalize turns a typed or untyped value into JSON types (maps, slices,
// strings, float64, bool, nil).
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// apiDefaults are the fields the API server fills in when a policy or
// binding leaves them out (k8s.io/kubernetes pkg/apis/admissionregistration
// /v1 defaults), with their default values: an installed object may carry
// them beyond what the shipped file says, and nothing else.
var apiDefaults = map[string]any{
	"failurePolicy":     "Fail",
	"matchPolicy":       "Equivalent",
	"namespaceSelector": map[string]any{},
	"objectSelector":    map[string]any{},
	"scope":             "*",
}

// covers reports whether got is want plus API defaults, and where it is not.
func covers(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			wv, inWant := w[k]
			gv, inGot := g[k]
			switch {
			case inWant && !inGot:
				if wv == nil {
					continue
				}
				return path + "." + k, false
			case !inWant:
				if def, ok := apiDefaults[k]; ok && reflect.DeepEqual(def, gv) {
					continue
				}
				if gv == nil {
					continue
				}
				return path + "." + k, false
			}
			if p, ok := covers(wv, gv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := covers(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(want, got) {
			return path, false
		}
		return "", true
	}
}
