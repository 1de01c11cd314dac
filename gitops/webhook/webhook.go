package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
)

// FieldManager is the field manager of the status patches the receiver
// makes (the source component's).
const FieldManager = "fleet-gitops"

// Defaults of Options.
const (
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMinInterval    = time.Second
	DefaultMaxSecretReads = 256
	DefaultMaxInFlight    = 8
	DefaultRequestTimeout = 20 * time.Second
)

// Results of fleet_gitops_webhooks_total.
const (
	resultTriggered        = "triggered"          // verified, GitRepos asked to sync
	resultVerified         = "verified"           // verified, no GitRepo follows the pushed ref
	resultIgnored          = "ignored"            // not a push (a ping, another event)
	resultUnauthorized     = "unauthorized"       // no GitRepo's secret verifies it
	resultBadRequest       = "bad_request"        // unreadable
	resultMethodNotAllowed = "method_not_allowed" // not a POST
	resultTooLarge         = "too_large"          // body over MaxBodyBytes
	resultUnavailable      = "unavailable"        // too many requests in flight
	resultError            = "error"              // the API server failed us
)

var webhooksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleet_gitops_webhooks_total",
	Help: "Webhook requests received by fleet gitops, by provider (github, gitlab, bitbucket, bitbucket-server, gitea, gogs, azure-devops, unknown) and result (triggered, verified, ignored, unauthorized, bad_request, method_not_allowed, too_large, unavailable, error).",
}, []string{"provider", "result"})

func init() { crmetrics.Registry.MustRegister(webhooksTotal) }

// Options configure a Receiver.
type Options struct {
	// Client reads GitRepos (the manager's cached client: IndexGitRepos
	// must be registered on its cache) and patches their status.
	Client client.Client
	// APIReader reads webhook Secrets, uncached (the manager's API reader).
	APIReader client.Reader
	// Trigger asks for an immediate ls-remote of a GitRepo (the GitRepo
	// controller's Trigger). It must not block long.
	Trigger func(key types.NamespacedName, reason string)
	// Log gets a debug line (V(1)) per request.
	Log logr.Logger
	// MaxBodyBytes bounds a payload (zero: DefaultMaxBodyBytes); larger: 413.
	MaxBodyBytes int64
	// MinInterval is the least time between two triggers of one GitRepo
	// (zero: DefaultMinInterval): a trigger within it is delayed to its
	// end, and all triggers within it make one.
	MinInterval time.Duration
	// MaxSecretReads bounds the Secrets one request reads (zero:
	// DefaultMaxSecretReads). GitRepos beyond it are not verified.
	MaxSecretReads int
	// MaxInFlight bounds the requests served at once (zero:
	// DefaultMaxInFlight); the others wait until their timeout, then 503.
	MaxInFlight int
	// RequestTimeout bounds the work of one request (zero:
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Receiver is the webhook endpoint: an http.Handler.
type Receiver struct {
	opts  Options
	slots chan struct{}

	mu      sync.Mutex
	limiter map[types.NamespacedName]*gate
}

// gate is one GitRepo's trigger rate limit.
type gate struct {
	last    time.Time // last trigger
	pending bool      // a trigger is scheduled for last+MinInterval
	commit  string    // the last commit written to status
}

// New returns the receiver. Client, APIReader and Trigger are required.
func New(opts Options) (*Receiver, error) {
	if opts.Client == nil || opts.APIReader == nil || opts.Trigger == nil {
		return nil, errors.New("webhook: Client, APIReader and Trigger are required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.MaxSecretReads <= 0 {
		opts.MaxSecretReads = DefaultMaxSecretReads
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Receiver{opts: opts, slots: make(chan struct{}, opts.MaxInFlight), limiter: map[types.NamespacedName]*gate{}}, nil
}

// Answer is the JSON body of every answer. It never names a GitRepo: the
// caller is not trusted to know the GitRepo inventory.
type Answer struct {
	// Triggered is how many GitRepos were asked to sync.
	Triggered int `json:"triggered"`
	// Message says what happened, or what is wrong with the request.
	Message string `json:"message"`
}

// ServeHTTP receives one webhook.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	provider := payload.ProviderOf(req.Header)
	log := rc.opts.Log.WithValues("provider", provider)
	answer := func(code int, result string, a Answer) {
		webhooksTotal.WithLabelValues(provider, result).Inc()
		log.V(1).Info("webhook", "result", result, "triggered", a.Triggered, "status", code)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(a)
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		answer(http.StatusMethodNotAllowed, resultMethodNotAllowed, Answer{Message: "webhooks are POST requests"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, rc.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			answer(http.StatusRequestEntityTooLarge, resultTooLarge, Answer{Message: fmt.Sprintf("the payload is larger than %d bytes", rc.opts.MaxBodyBytes)})
			return
		}
		answer(http.StatusBadRequest, resultBadRequest, Answer{Message: "the body cannot be read"})
		return
	}
	p, err := payload.Parse(provider, req.Header, body)
	if err != nil {
		answer(http.StatusBadRequest, resultBadRequest, Answer{Message: err.Error()})
		return
	}
	if p.Ignored != "" {
		answer(http.StatusOK, resultIgnored, Answer{Message: fmt.Sprintf("%s event %q ignored: only pushes trigger a sync", provider, truncate(p.Ignored, 64))})
		return
	}
	keys := payload.RepoKeys(p.URLs)
	if len(keys) == 0 {
		answer(http.StatusBadRequest, resultBadRequest, Answer{Message: "the payload names no repository URL fleet can read (https, http or ssh)"})
		return
	}
	log = log.WithValues("repository", truncate(keys[0], 256))

	ctx, cancel := context.WithTimeout(req.Context(), rc.opts.RequestTimeout)
	defer cancel()
	select {
	case rc.slots <- struct{}{}:
		defer func() { <-rc.slots }()
	case <-ctx.Done():
		answer(http.StatusServiceUnavailable, resultUnavailable, Answer{Message: "too many webhooks at once: try again"})
		return
	}
	n, verified, err := rc.handle(ctx, log, p, keys, body, req.Header)
	switch {
	case err != nil:
		log.Error(err, "webhook: reading GitRepos failed")
		answer(http.StatusInternalServerError, resultError, Answer{Message: "the webhook could not be processed: try again"})
	case !verified:
		answer(http.StatusUnauthorized, resultUnauthorized, Answer{Message: "no GitRepo's webhookSecret verifies this payload"})
	case n == 0:
		answer(http.StatusOK, resultVerified, Answer{Message: "no GitRepo follows the pushed ref"})
	default:
		answer(http.StatusAccepted, resultTriggered, Answer{Triggered: n, Message: "the repository is asked for its new commit"})
	}
}

// candidate is a GitRepo of the payload's repository.
type candidate struct {
	repo    *fleet.GitRepo
	ref     string // the ref it follows
	follows bool   // it follows a pushed ref (or the ref is unknown)
	commit  string // the commit the payload names for its ref
}

// handle finds the GitRepos of the payload's repository, verifies the
// payload with their webhook Secrets (those following a pushed ref first:
// the others only when none of those verifies, to tell an authentic push
// to another branch from a forged one), triggers those that verify it and
// follow the ref, and records the webhook in their status. It returns how
// many it triggered and whether any GitRepo verified the payload.
func (rc *Receiver) handle(ctx context.Context, log logr.Logger, p payload.Push, keys []string, body []byte, h http.Header) (int, bool, error) {
	var cands []candidate
	seen := map[types.UID]bool{}
	for _, k := range keys {
		var list fleet.GitRepoList
		if err := rc.opts.Client.List(ctx, &list, client.MatchingFields{RepoIndex: k}); err != nil {
			return 0, false, fmt.Errorf("listing GitRepos of repository %s: %w", k, err)
		}
		for i := range list.Items {
			repo := &list.Items[i]
			if seen[repo.UID] || repo.Spec.WebhookSecret == "" || !repo.DeletionTimestamp.IsZero() {
				continue
			}
			seen[repo.UID] = true
			ref := refOf(repo)
			follows, commit := matchRef(ref, p.Refs)
			cands = append(cands, candidate{repo: repo, ref: ref, follows: follows, commit: commit})
		}
	}
	// Those following the ref first; a stable order otherwise.
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if a.follows != b.follows {
			if a.follows {
				return -1
			}
			return 1
		}
		return strings.Compare(a.repo.Namespace+"/"+a.repo.Name, b.repo.Namespace+"/"+b.repo.Name)
	})

	// Each Secret is read once per request, at most MaxSecretReads of them.
	type secretKey struct{ ns, name string }
	verdicts := map[secretKey]bool{}
	reads, capped := 0, false
	verifies := func(repo *fleet.GitRepo) bool {
		sk := secretKey{repo.Namespace, repo.Spec.WebhookSecret}
		if v, ok := verdicts[sk]; ok {
			return v
		}
		if reads >= rc.opts.MaxSecretReads {
			capped = true
			return false
		}
		reads++
		var s corev1.Secret
		err := rc.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: sk.ns, Name: sk.name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			log.V(1).Info("webhook: the GitRepo's webhookSecret does not exist", "gitRepo", repo.Namespace+"/"+repo.Name, "secret", sk.name)
			verdicts[sk] = false
			return false
		case err != nil:
			// Not verified (a 500 would tell the caller a GitRepo names
			// the repository); the provider's next push tries again.
			log.Error(err, "webhook: reading the GitRepo's webhookSecret failed", "gitRepo", repo.Namespace+"/"+repo.Name, "secret", sk.name)
			return false
		}
		v := payload.Verify(p.Provider, h, body, s.Data)
		verdicts[sk] = v
		return v
	}

	var triggered []candidate
	verified := false
	for _, c := range cands {
		if !c.follows && verified {
			break // the rest follow other refs: nothing to learn from them
		}
		if !verifies(c.repo) {
			continue
		}
		verified = true
		if c.follows {
			triggered = append(triggered, c)
		}
	}
	if capped {
		log.Info("webhook: more GitRepos of this repository than Secrets one request reads; some were not verified", "maxSecretReads", rc.opts.MaxSecretReads)
	}

	// Trigger first (the sync starts at once), then record it in status.
	now := rc.opts.Now()
	var toPatch []candidate
	for _, c := range triggered {
		if rc.trigger(c, p.Provider, now) {
			toPatch = append(toPatch, c)
		}
	}
	for _, c := range toPatch {
		if err := rc.patchStatus(ctx, c, now); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			log.Error(err, "webhook: recording the webhook in the GitRepo's status failed", "gitRepo", c.repo.Namespace+"/"+c.repo.Name)
			continue
		}
		log.V(1).Info("webhook: GitRepo triggered", "gitRepo", c.repo.Namespace+"/"+c.repo.Name, "ref", c.ref, "commit", c.commit)
	}
	return len(triggered), verified, nil
}

// trigger asks for a sync of c's GitRepo now, or at the end of its
// MinInterval when it was triggered within it (one trigger for all that
// come meanwhile). It reports whether the status should record the
// webhook: at most once per interval, unless the commit changed (a
// replayed payload writes nothing more).
func (rc *Receiver) trigger(c candidate, provider string, now time.Time) bool {
	key := types.NamespacedName{Namespace: c.repo.Namespace, Name: c.repo.Name}
	reason := provider + " webhook"
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.sweep(now)
	g := rc.limiter[key]
	if g == nil {
		g = &gate{}
		rc.limiter[key] = g
	}
	wait := g.last.Add(rc.opts.MinInterval).Sub(now)
	record := wait <= 0 || c.commit != g.commit
	g.commit = c.commit
	switch {
	case wait <= 0:
		g.last = now
		rc.opts.Trigger(key, reason)
		return true
	case g.pending:
		return record
	}
	g.pending = true
	time.AfterFunc(wait, func() {
		rc.mu.Lock()
		g.pending = false
		g.last = rc.opts.Now()
		rc.mu.Unlock()
		rc.opts.Trigger(key, reason)
	})
	return record
}

// sweep forgets the gates of GitRepos not triggered for a minute, so the
// limiter holds only the recent ones. Called with mu held.
func (rc *Receiver) sweep(now time.Time) {
	if len(rc.limiter) < 1024 {
		return
	}
	for k, g := range rc.limiter {
		if !g.pending && now.Sub(g.last) > time.Minute+rc.opts.MinInterval {
			delete(rc.limiter, k)
		}
	}
}

// patchStatus records the webhook in the GitRepo's status: a merge patch
// of lastWebhookTime and webhookCommit only (no resourceVersion: it
// cannot conflict with the controller's own status writes, and touches no
// other field).
func (rc *Receiver) patchStatus(ctx context.Context, c candidate, now time.Time) error {
	st := map[string]any{"lastWebhookTime": metav1.NewTime(now)}
	if c.commit != "" {
		st["webhookCommit"] = c.commit
	}
	data, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	repo := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: c.repo.Namespace, Name: c.repo.Name}}
	return rc.opts.Client.Status().Patch(ctx, repo, client.RawPatch(types.MergePatchType, data), client.FieldOwner(FieldManager))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
