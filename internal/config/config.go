// Package config is the controller configuration: the JSON document under key
// "config" of the fleet-controller ConfigMap (written by charts/fleet). It
// holds what the controller gives to agents (API server URL and CA, image,
// intervals, TLS mode) and the controller's own policies.
package config

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

const (
	// ConfigMapName is the controller's ConfigMap in the system namespace.
	ConfigMapName = "fleet-controller"
	// ConfigMapKey holds the JSON document.
	ConfigMapKey = "config"

	// TLS modes of the agent's connection upstream.
	TLSModeSystemStore = "system-store"
	TLSModeStrict      = "strict"

	DefaultAgentImage              = "gitops-fleet/fleet:0.1.0"
	DefaultAgentCheckinInterval    = time.Minute
	DefaultImportTokenTTL          = 12 * time.Hour
	DefaultSystemNamespace         = "cattle-fleet-system"
	DefaultSystemRegistrationNS    = "cattle-fleet-clusters-system"
	DefaultAgentLeaseDuration      = 30 * time.Second
	DefaultAgentRenewDeadline      = 25 * time.Second
	DefaultAgentRetryPeriod        = 10 * time.Second
	DefaultRequestCredentialTTL    = 24 * time.Hour
	DefaultOfflineMissedHeartbeats = 3
	DefaultBootstrapNamespace      = "fleet-local"
	// LocalClusterName is the Cluster the controller makes for the cluster it
	// runs in (bootstrap), as Fleet names it.
	LocalClusterName = "local"
)

// Config is the controller configuration. Zero values mean "default"; use
// the getters, which apply the defaults.
type Config struct {
	// APIServerURL is the upstream API server URL given to agents.
	APIServerURL string `json:"apiServerURL,omitempty"`
	// APIServerCA is the PEM CA bundle of the upstream API server given to
	// agents (base64 in JSON, as in Fleet).
	APIServerCA []byte `json:"apiServerCA,omitempty"`
	// AgentTLSMode is system-store (default) or strict.
	AgentTLSMode string `json:"agentTLSMode,omitempty"`
	// AgentCheckinInterval is the agents' heartbeat interval.
	AgentCheckinInterval metav1.Duration `json:"agentCheckinInterval,omitempty"`
	// AgentImage is the agent's image reference (repository:tag).
	AgentImage string `json:"agentImage,omitempty"`
	// AgentImagePullPolicy is the agent's image pull policy.
	AgentImagePullPolicy corev1.PullPolicy `json:"agentImagePullPolicy,omitempty"`
	// SystemDefaultRegistry prefixes the agent image.
	SystemDefaultRegistry string `json:"systemDefaultRegistry,omitempty"`
	// AgentImagePullSecrets name Secrets for the agent pod, used when a
	// Cluster sets no agentPullSecrets.
	AgentImagePullSecrets []string `json:"agentImagePullSecrets,omitempty"`
	// AgentReplicas is the agent Deployment's replica count (default 1).
	AgentReplicas *int32 `json:"agentReplicas,omitempty"`
	// AgentLeaderElection are the agent's Lease timings.
	AgentLeaderElection LeaderElection `json:"agentLeaderElection,omitempty"`
	// AgentProxy is the agent's HTTP proxy configuration.
	AgentProxy Proxy `json:"agentProxy,omitempty"`
	// ManageAgent makes each Cluster's agent follow its own Bundle (default
	// true).
	ManageAgent *bool `json:"manageAgent,omitempty"`
	// RegistrationTokenTTLRequired deletes ClusterRegistrationTokens with no
	// TTL.
	RegistrationTokenTTLRequired bool `json:"registrationTokenTTLRequired,omitempty"`
	// ImportTokenTTL is the TTL of the import-token-<cluster> tokens made for
	// manager-initiated clusters (default 12h).
	ImportTokenTTL metav1.Duration `json:"importTokenTTL,omitempty"`
	// RequestCredentialTTL bounds the lifetime of an agent's request
	// credential; agents renew it before it expires (default 24h).
	RequestCredentialTTL metav1.Duration `json:"requestCredentialTTL,omitempty"`
	// OfflineAfterMissedHeartbeats marks a Cluster offline after this many
	// missed heartbeat intervals (default 3).
	OfflineAfterMissedHeartbeats int `json:"offlineAfterMissedHeartbeats,omitempty"`

	// AgentRollout stages a change that rolls every agent (a changed agent
	// chart, an agent setting here) in waves (docs/operations.md, "Staged
	// agent rollouts"). Unset: every agent at once.
	AgentRollout *fleet.AgentRolloutStrategy `json:"agentRollout,omitempty"`

	// Bootstrap registers the cluster the controller runs in as Cluster
	// "local" (docs/operations.md, "The local cluster").
	Bootstrap Bootstrap `json:"bootstrap,omitempty"`

	// Trust boundaries (docs/operations.md, "Security model").

	// InsecureKubeconfig opts in to kubeconfig features that make the
	// controller use more than the credentials in a kubeconfig Secret. All
	// off by default.
	InsecureKubeconfig InsecureKubeconfig `json:"insecureKubeconfig,omitempty"`
	// KubeConfigSecretNamespaces lists, per workspace, the other namespaces
	// whose Secrets that workspace's Clusters may name in
	// spec.kubeConfigSecretNamespace (key "*": every workspace). By default a
	// Cluster may only use a Secret of its own namespace.
	KubeConfigSecretNamespaces map[string][]string `json:"kubeConfigSecretNamespaces,omitempty"`
	// AllowInsecureAPIServerURL allows an http:// apiServerURL for agents
	// (in this configuration or a kubeconfig Secret's apiServerURL key): their
	// bearer tokens would cross the network unencrypted.
	AllowInsecureAPIServerURL bool `json:"allowInsecureAPIServerURL,omitempty"`
	// AllowGitInsecureSkipTLSVerify lets GitRepos set
	// insecureSkipTLSVerify: the source component would then fetch their
	// repository without checking who answers. Off, such a GitRepo is
	// refused (Accepted=False, InsecureSkipTLSVerifyRefused).
	AllowGitInsecureSkipTLSVerify bool `json:"allowGitInsecureSkipTLSVerify,omitempty"`

	// IgnoreClusterRegistrationLabels stops agent-supplied labels from
	// reaching the Clusters the controller creates.
	IgnoreClusterRegistrationLabels bool `json:"ignoreClusterRegistrationLabels,omitempty"`
	// CAPINamespaces opts namespaces in to Cluster API auto-registration
	// ("*": every namespace). Off when neither this nor
	// CAPIClusterSelector is set.
	CAPINamespaces []string `json:"capiNamespaces,omitempty"`
	// CAPIClusterSelector opts in cluster.x-k8s.io Clusters by label (a
	// label selector such as "fleet=enabled"). With CAPINamespaces set too,
	// a CAPI cluster must match both.
	CAPIClusterSelector string `json:"capiClusterSelector,omitempty"`

	// Registration policy.

	// AgentLabelKeys restricts the labels agents may give the Clusters
	// registration creates to these keys: an entry is a label key ("env",
	// "example.com/region") or a prefix ending in "*" ("example.com/*",
	// "team-*"). Empty: any key. Keys under fleet.cattle.io/ and
	// management.cattle.io/ are dropped in any case.
	AgentLabelKeys []string `json:"agentLabelKeys,omitempty"`

	// Bundle rendering limits.

	// BundleMaxSize bounds a Bundle's resources, all together, after base64
	// and gzip decoding (default 32Mi).
	BundleMaxSize *resource.Quantity `json:"bundleMaxSize,omitempty"`
	// BundleMaxResourceSize bounds one decoded resource of a Bundle
	// (default 16Mi).
	BundleMaxResourceSize *resource.Quantity `json:"bundleMaxResourceSize,omitempty"`
	// BundleRenderTimeout bounds the wall-clock time of one Bundle render
	// (default 30s).
	BundleRenderTimeout metav1.Duration `json:"bundleRenderTimeout,omitempty"`
	// BundleRenderMemoryLimit bounds the memory of one render worker, the
	// child process that renders a Bundle (default 256Mi).
	BundleRenderMemoryLimit *resource.Quantity `json:"bundleRenderMemoryLimit,omitempty"`
	// BundleRenderConcurrency bounds how many render workers run at once
	// (default 2).
	BundleRenderConcurrency int `json:"bundleRenderConcurrency,omitempty"`
}

// InsecureKubeconfig switches on kubeconfig features that let whoever
// writes a kubeconfig Secret make the controller act with more than the
// credentials in it.
type InsecureKubeconfig struct {
	// Exec allows exec credential plugins and auth-providers: they run
	// inside the controller's pod.
	Exec bool `json:"exec,omitempty"`
	// TLS allows insecure-skip-tls-verify and http:// servers.
	TLS bool `json:"tls,omitempty"`
	// Files allows tokenFile, client-certificate, client-key and
	// certificate-authority paths: files of the controller's pod, its own
	// ServiceAccount token among them.
	Files bool `json:"files,omitempty"`
	// Proxy allows proxy-url.
	Proxy bool `json:"proxy,omitempty"`
}

// Bootstrap is the local cluster's configuration, named as Fleet's chart
// names it (bootstrap.enabled, bootstrap.namespace, bootstrap.agentNamespace).
type Bootstrap struct {
	// Enabled makes the controller keep Cluster "local" for its own cluster
	// (default true). Turning it off makes nothing and deletes nothing.
	Enabled *bool `json:"enabled,omitempty"`
	// Namespace is the workspace of Cluster "local" (default fleet-local).
	Namespace string `json:"namespace,omitempty"`
	// AgentNamespace is where the local agent runs (default
	// cattle-fleet-system).
	AgentNamespace string `json:"agentNamespace,omitempty"`
}

// BootstrapEnabled reports whether the controller keeps the local cluster.
func (c *Config) BootstrapEnabled() bool {
	return c.Bootstrap.Enabled == nil || *c.Bootstrap.Enabled
}

// GetBootstrapNamespace returns the local cluster's workspace, default
// fleet-local.
func (c *Config) GetBootstrapNamespace() string {
	if c.Bootstrap.Namespace == "" {
		return DefaultBootstrapNamespace
	}
	return c.Bootstrap.Namespace
}

// GetBootstrapAgentNamespace returns the local agent's namespace, default
// cattle-fleet-system.
func (c *Config) GetBootstrapAgentNamespace() string {
	if c.Bootstrap.AgentNamespace == "" {
		return DefaultSystemNamespace
	}
	return c.Bootstrap.AgentNamespace
}

// LeaderElection are Lease timings.
type LeaderElection struct {
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	RetryPeriod   metav1.Duration `json:"retryPeriod,omitempty"`
}

// Proxy is an HTTP proxy configuration.
type Proxy struct {
	HTTPProxy  string `json:"httpProxy,omitempty"`
	HTTPSProxy string `json:"httpsProxy,omitempty"`
	NoProxy    string `json:"noProxy,omitempty"`
}

// Parse reads a configuration document (JSON or YAML) and validates it.
// Unknown fields are errors, so a typo does not silently fall back to a
// default.
func Parse(data []byte) (*Config, error) {
	cfg := &Config{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return cfg, nil
	}
	if err := strictyaml.Unmarshal(data, cfg); err != nil {
		if ferr := durationFieldError(data); ferr != nil {
			err = ferr
		} else if ferr := quantityFieldError(data); ferr != nil {
			err = ferr
		}
		return nil, fmt.Errorf("controller config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// FromConfigMap reads the configuration from a fleet-controller ConfigMap.
func FromConfigMap(cm *corev1.ConfigMap) (*Config, error) {
	data, ok := cm.Data[ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %q", cm.Namespace, cm.Name, ConfigMapKey)
	}
	cfg, err := Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return cfg, nil
}

// Validate reports every invalid field at once: it checks Rules.
func (c *Config) Validate() error {
	var errs []error
	for _, r := range Rules {
		errs = append(errs, r.check(c)...)
	}
	return errors.Join(errs...)
}

// validateLabelKeyPattern accepts a label key, or a prefix of one followed
// by "*".
func validateLabelKeyPattern(p string) error {
	prefix, wildcard := strings.CutSuffix(p, "*")
	if !wildcard {
		if msgs := validation.IsQualifiedName(p); len(msgs) > 0 {
			return fmt.Errorf("%q is not a label key (%s); use a key such as env or example.com/region, or a prefix ending in * such as example.com/*", p, strings.Join(msgs, "; "))
		}
		return nil
	}
	if prefix == "" {
		return fmt.Errorf("%q would allow every key: leave agentLabelKeys empty for that", p)
	}
	if strings.Contains(prefix, "*") {
		return fmt.Errorf("%q: only a trailing * is supported", p)
	}
	// Completed with one character, the prefix must be a key: catches
	// "example..com/*" or "a/b/*" while allowing "example.com/*" and "team-*".
	if msgs := validation.IsQualifiedName(prefix + "x"); len(msgs) > 0 {
		return fmt.Errorf("%q: no label key starts with %q (%s)", p, prefix, strings.Join(msgs, "; "))
	}
	return nil
}

// AgentLabelKeyAllowed reports whether agentLabelKeys lets agents set the
// label key (reserved prefixes are the caller's concern). An empty list
// allows every key.
func (c *Config) AgentLabelKeyAllowed(key string) bool {
	if len(c.AgentLabelKeys) == 0 {
		return true
	}
	for _, p := range c.AgentLabelKeys {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(key, prefix) {
				return true
			}
		} else if key == p {
			return true
		}
	}
	return false
}

// OfflineAfter is how long a Cluster's agent may miss heartbeats before the
// Cluster counts as offline: offlineAfterMissedHeartbeats times
// agentCheckinInterval.
func (c *Config) OfflineAfter() time.Duration {
	return time.Duration(c.GetOfflineAfterMissedHeartbeats()) * c.GetAgentCheckinInterval()
}

// GetAgentTLSMode returns the TLS mode, default system-store.
func (c *Config) GetAgentTLSMode() string {
	if c.AgentTLSMode == "" {
		return TLSModeSystemStore
	}
	return c.AgentTLSMode
}

// GetAgentCheckinInterval returns the heartbeat interval, default 1m.
func (c *Config) GetAgentCheckinInterval() time.Duration {
	return orDefault(c.AgentCheckinInterval.Duration, DefaultAgentCheckinInterval)
}

// GetAgentImage returns the agent image reference.
func (c *Config) GetAgentImage() string {
	if c.AgentImage == "" {
		return DefaultAgentImage
	}
	return c.AgentImage
}

// GetAgentImagePullPolicy returns the pull policy, default IfNotPresent.
func (c *Config) GetAgentImagePullPolicy() corev1.PullPolicy {
	if c.AgentImagePullPolicy == "" {
		return corev1.PullIfNotPresent
	}
	return c.AgentImagePullPolicy
}

// GetAgentReplicas returns the agent replica count, default 1.
func (c *Config) GetAgentReplicas() int32 {
	if c.AgentReplicas == nil {
		return 1
	}
	return *c.AgentReplicas
}

// GetAgentLeaderElection returns the agent's Lease timings with defaults.
func (c *Config) GetAgentLeaderElection() (lease, renew, retry time.Duration) {
	le := c.AgentLeaderElection
	return orDefault(le.LeaseDuration.Duration, DefaultAgentLeaseDuration),
		orDefault(le.RenewDeadline.Duration, DefaultAgentRenewDeadline),
		orDefault(le.RetryPeriod.Duration, DefaultAgentRetryPeriod)
}

// GetManageAgent reports whether agents follow their own Bundle.
func (c *Config) GetManageAgent() bool { return c.ManageAgent == nil || *c.ManageAgent }

// GetImportTokenTTL returns the import token TTL, default 12h.
func (c *Config) GetImportTokenTTL() time.Duration {
	return orDefault(c.ImportTokenTTL.Duration, DefaultImportTokenTTL)
}

// GetRequestCredentialTTL returns the request credential TTL, default 24h.
func (c *Config) GetRequestCredentialTTL() time.Duration {
	return orDefault(c.RequestCredentialTTL.Duration, DefaultRequestCredentialTTL)
}

// GetOfflineAfterMissedHeartbeats returns the offline threshold, default 3.
func (c *Config) GetOfflineAfterMissedHeartbeats() int {
	if c.OfflineAfterMissedHeartbeats == 0 {
		return DefaultOfflineMissedHeartbeats
	}
	return c.OfflineAfterMissedHeartbeats
}

// AllWorkspaces as a key of kubeConfigSecretNamespaces applies to every
// workspace.
const AllWorkspaces = "*"

// KubeConfigSecretNamespaceAllowed reports whether a Cluster in workspace may
// use a kubeconfig Secret in secretNamespace: its own namespace always,
// another only when the configuration lists it for that workspace or for
// all.
func (c *Config) KubeConfigSecretNamespaceAllowed(workspace, secretNamespace string) bool {
	if secretNamespace == "" || secretNamespace == workspace {
		return true
	}
	return slices.Contains(c.KubeConfigSecretNamespaces[workspace], secretNamespace) ||
		slices.Contains(c.KubeConfigSecretNamespaces[AllWorkspaces], secretNamespace)
}

// CheckAPIServerURLScheme checks an upstream URL for agents (empty: none
// given): it must be an absolute https:// URL with a host, or http:// when
// the configuration allows it (else an *InsecureAPIServerURLError). A URL
// without a scheme ("upstream:6443") is refused whatever the switch: a
// client-go client dials it as plain http, and agents refuse it.
func (c *Config) CheckAPIServerURLScheme(apiServerURL string) error {
	if apiServerURL == "" {
		return nil
	}
	u, err := url.Parse(apiServerURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("apiServerURL %q must be an absolute http(s) URL such as https://rancher.example.com:6443 (without a scheme, clients dial plain http)", apiServerURL)
	}
	if u.Scheme == "http" && !c.AllowInsecureAPIServerURL {
		return &InsecureAPIServerURLError{URL: apiServerURL}
	}
	return nil
}

// InsecureAPIServerURLError is a plain http upstream URL for agents that the
// configuration does not allow (allowInsecureAPIServerURL).
type InsecureAPIServerURLError struct{ URL string }

func (e *InsecureAPIServerURLError) Error() string {
	return fmt.Sprintf("apiServerURL %q is plain http: agents would send their bearer tokens unencrypted; use https, or set allowInsecureAPIServerURL in the controller configuration", e.URL)
}

// CAPIAllNamespaces in capiNamespaces opts in every namespace.
const CAPIAllNamespaces = "*"

// CAPIEnabled reports whether Cluster API auto-registration is on.
func (c *Config) CAPIEnabled() bool {
	return len(c.CAPINamespaces) > 0 || strings.TrimSpace(c.CAPIClusterSelector) != ""
}

// CAPISelects reports whether a cluster.x-k8s.io Cluster in namespace with
// these labels is opted in to auto-registration: its namespace is listed
// (or the list is empty) and its labels match the selector (or there is
// none); at least one of the two must be configured.
func (c *Config) CAPISelects(namespace string, lbls map[string]string) bool {
	if !c.CAPIEnabled() {
		return false
	}
	if len(c.CAPINamespaces) > 0 && !slices.Contains(c.CAPINamespaces, CAPIAllNamespaces) && !slices.Contains(c.CAPINamespaces, namespace) {
		return false
	}
	sel, err := labels.Parse(c.CAPIClusterSelector)
	if err != nil {
		return false // Validate reports it; an unparsable selector selects nothing
	}
	return sel.Matches(labels.Set(lbls))
}

// durationFieldError names the duration field that does not parse: the JSON
// decoder's own error does not say which field it was.
func durationFieldError(data []byte) error {
	var m map[string]any
	if yaml.Unmarshal(data, &m) != nil {
		return nil
	}
	for _, field := range DurationFields() {
		v, _ := valueAt(m, field)
		s, ok := v.(string)
		if !ok {
			continue
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("%s %q is not a Go duration such as 30s, 5m or 12h", field, s)
		}
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Bundle rendering limits: defaults, getters and validation.

const (
	DefaultBundleMaxSize           = 32 << 20
	DefaultBundleMaxResourceSize   = 16 << 20
	DefaultBundleRenderTimeout     = 30 * time.Second
	DefaultBundleRenderMemoryLimit = 256 << 20
	DefaultBundleRenderConcurrency = 2

	// minBundleRenderMemoryLimit leaves a render worker room for its own
	// start (the binary's packages) before it reads a Bundle.
	minBundleRenderMemoryLimit = 64 << 20
	maxBundleRenderConcurrency = 64
)

// GetBundleMaxSize returns the limit of a Bundle's decoded resources, all
// together, in bytes (default 32Mi).
func (c *Config) GetBundleMaxSize() int64 {
	return quantityOr(c.BundleMaxSize, DefaultBundleMaxSize)
}

// GetBundleMaxResourceSize returns the limit of one decoded resource, in
// bytes (default 16Mi).
func (c *Config) GetBundleMaxResourceSize() int64 {
	return quantityOr(c.BundleMaxResourceSize, DefaultBundleMaxResourceSize)
}

// GetBundleRenderTimeout returns the time limit of one render (default 30s).
func (c *Config) GetBundleRenderTimeout() time.Duration {
	return orDefault(c.BundleRenderTimeout.Duration, DefaultBundleRenderTimeout)
}

// GetBundleRenderMemoryLimit returns the memory limit of one render worker,
// in bytes (default 256Mi).
func (c *Config) GetBundleRenderMemoryLimit() int64 {
	return quantityOr(c.BundleRenderMemoryLimit, DefaultBundleRenderMemoryLimit)
}

// GetBundleRenderConcurrency returns how many renders may run at once
// (default 2).
func (c *Config) GetBundleRenderConcurrency() int {
	if c.BundleRenderConcurrency == 0 {
		return DefaultBundleRenderConcurrency
	}
	return c.BundleRenderConcurrency
}

// quantityFieldError names the quantity field that does not parse: the
// decoder's own error does not say which field it was.
func quantityFieldError(data []byte) error {
	var m map[string]any
	if yaml.Unmarshal(data, &m) != nil {
		return nil
	}
	for _, field := range QuantityFields() {
		v, ok := valueAt(m, field)
		if !ok {
			continue
		}
		s := fmt.Sprint(v)
		if _, err := resource.ParseQuantity(s); err != nil {
			return fmt.Errorf("%s %q is not a quantity such as 32Mi or 512Ki", field, s)
		}
	}
	return nil
}

// valueAt is the value at a dotted path of a decoded document.
func valueAt(m map[string]any, field string) (any, bool) {
	var v any = m
	for _, k := range strings.Split(field, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func quantityOr(q *resource.Quantity, def int64) int64 {
	if q == nil || q.IsZero() {
		return def
	}
	return q.Value()
}

// DefaultRolloutProgressDeadline bounds a wave of a staged agent rollout.
const DefaultRolloutProgressDeadline = 10 * time.Minute

// AgentMaySetLabel reports whether agents may give the Clusters their
// registrations create the label key under this configuration: not with
// ignoreClusterRegistrationLabels, never a key under a reserved prefix
// (fleet.cattle.io/, management.cattle.io/) but the created-by-agent-pod
// label the agent sets itself, and otherwise what agentLabelKeys allows.
// It is registration.ClusterLabels' rule for one key (a test holds the two
// together; that package cannot be imported here). Whatever selects
// Clusters on such a key can be steered by a registration token's holder.
func (c *Config) AgentMaySetLabel(key string) bool {
	if c.IgnoreClusterRegistrationLabels {
		return false
	}
	if key == fleet.CreatedByAgentPodLabel {
		return true
	}
	for _, p := range fleet.ReservedLabelPrefixes {
		if strings.HasPrefix(key, p) {
			return false
		}
	}
	return c.AgentLabelKeyAllowed(key)
}

// checkCanaryKeys refuses a canary selector on a label key agents may set
// (AgentMaySetLabel): whoever holds a registration token
// could put its cluster into the canary, or keep it out, and so stall or
// falsely pass every agent rollout. Every key counts, in matchLabels and in
// matchExpressions, whatever the operator (NotIn and DoesNotExist are
// steered the same way).
func (c *Config) checkCanaryKeys(sel *metav1.LabelSelector) []error {
	keys := map[string]bool{}
	for k := range sel.MatchLabels {
		keys[k] = true
	}
	for _, e := range sel.MatchExpressions {
		keys[e.Key] = true
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !c.AgentMaySetLabel(k) {
			continue
		}
		who := fmt.Sprintf("agentLabelKeys %q lets them", c.AgentLabelKeys)
		if len(c.AgentLabelKeys) == 0 {
			who = "agentLabelKeys is empty, which lets them set any key outside fleet.cattle.io/ and management.cattle.io/"
		}
		if k == fleet.CreatedByAgentPodLabel {
			who = "agents set it themselves"
		}
		errs = append(errs, fmt.Errorf("agentRollout.canary.selector uses label key %q, which agents may set on the Clusters they register (%s): "+
			"a registration token holder could put its cluster into the canary or keep it out; select the canary on a key agents cannot set "+
			"(set agentLabelKeys to the keys agents may set, without %q, or ignoreClusterRegistrationLabels: true), or give canary.count instead", k, who, k))
	}
	return errs
}

// RolloutWaveSize is the number of Clusters a wave after the canary
// updates, out of total: maxUnavailable as a count, or as a percentage of
// total rounded up (at least one). Without maxUnavailable, all of them.
func RolloutWaveSize(s *fleet.AgentRolloutStrategy, total int) (int, error) {
	if s == nil || s.MaxUnavailable == nil {
		return max(total, 1), nil
	}
	mu := *s.MaxUnavailable
	if mu.Type == intstr.String && !strings.HasSuffix(mu.StrVal, "%") {
		return 0, fmt.Errorf("agentRollout.maxUnavailable %q must be a count such as 5 or a percentage such as 10%%", mu.StrVal)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&mu, total, true)
	if err != nil {
		return 0, fmt.Errorf("agentRollout.maxUnavailable %q must be a count such as 5 or a percentage such as 10%%: %w", mu.String(), err)
	}
	if mu.Type == intstr.String {
		pct, _ := strconv.Atoi(strings.TrimSuffix(mu.StrVal, "%"))
		if pct <= 0 || pct > 100 {
			return 0, fmt.Errorf("agentRollout.maxUnavailable %q must be a percentage above 0%% and at most 100%%", mu.StrVal)
		}
	} else if mu.IntVal <= 0 {
		return 0, fmt.Errorf("agentRollout.maxUnavailable %d must be at least 1", mu.IntVal)
	}
	return max(n, 1), nil
}

// RolloutProgressDeadline is agentRollout.progressDeadline, default 10m.
func RolloutProgressDeadline(s *fleet.AgentRolloutStrategy) time.Duration {
	if s == nil || s.ProgressDeadline == nil || s.ProgressDeadline.Duration <= 0 {
		return DefaultRolloutProgressDeadline
	}
	return s.ProgressDeadline.Duration
}
