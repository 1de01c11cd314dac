// Package agentvalues holds the values of the agent's chart
// (charts/fleet-agent), the one type for them: built from a Cluster and
// the controller configuration (ForCluster), as a token's values file
// (ForToken) or offline (Offline), read back from a values file (Parse),
// written (YAML) and hashed (Hash).
package agentvalues

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
)

// TokenPlaceholder stands for the import token wherever the real token
// must not appear: Bundles, `fleet render` output, logs. The controller
// puts the real token into the bootstrap Secret just before it applies.
const TokenPlaceholder = "<fleet:import-token: filled in by the controller at deploy, never stored>"

// Bootstrap is what goes into the fleet-agent-bootstrap Secret.
type Bootstrap struct {
	// APIServerURL and APIServerCA, when set, override the controller
	// config (they come from the kubeconfig Secret's keys of the same name).
	APIServerURL string
	APIServerCA  []byte
	// TokenName is the ClusterRegistrationToken's name.
	TokenName string
	// ClusterNamespace is the namespace the agent registers into (the
	// token's and the Cluster's namespace).
	ClusterNamespace string
	// SystemRegistrationNamespace is where the credential is handed back.
	SystemRegistrationNamespace string
	// Token is the import token, or TokenPlaceholder.
	Token string
}

// Values are the values of charts/fleet-agent, the one type for them:
// ForCluster builds what the controller renders a Cluster's agent with (its
// first deploy and its agent Bundle), ForToken the values file of a
// ClusterRegistrationToken for helm install, Parse reads one back, and
// `fleet render agent` prints either. Field names follow the
// chart's values.yaml; see values.schema.json there. The JSON encoding is
// what Hash covers: changing a field's name, order or omitempty changes the
// hash of every agent, and the controller would push every manager-initiated
// agent again.
type Values struct {
	APIServerURL                string            `json:"apiServerURL"`
	InsecureAPIServerURL        bool              `json:"insecureAPIServerURL,omitempty"`
	APIServerCA                 string            `json:"apiServerCA"`
	Token                       string            `json:"token"`
	TokenName                   string            `json:"tokenName"`
	ClusterNamespace            string            `json:"clusterNamespace"`
	SystemRegistrationNamespace string            `json:"systemRegistrationNamespace"`
	ClientID                    string            `json:"clientID"`
	Labels                      map[string]string `json:"labels"`
	AgentTLSMode                string            `json:"agentTLSMode"`
	CheckinInterval             string            `json:"checkinInterval"`
	Generation                  int64             `json:"generation"`
	Bootstrap                   struct {
		Enabled bool `json:"enabled"`
	} `json:"bootstrap"`
	Image struct {
		Repository      string `json:"repository"`
		Tag             string `json:"tag"`
		ImagePullPolicy string `json:"imagePullPolicy"`
	} `json:"image"`
	Global struct {
		Cattle struct {
			SystemDefaultRegistry string `json:"systemDefaultRegistry"`
		} `json:"cattle"`
	} `json:"global"`
	PrivateRepoURL   string                        `json:"privateRepoURL"`
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets"`
	Replicas         int32                         `json:"replicas"`
	Env              []corev1.EnvVar               `json:"env"`
	Tolerations      []corev1.Toleration           `json:"tolerations"`
	Affinity         *corev1.Affinity              `json:"affinity,omitempty"`
	Resources        *corev1.ResourceRequirements  `json:"resources,omitempty"`
	HostNetwork      bool                          `json:"hostNetwork"`
	PriorityClass    struct {
		Create           bool   `json:"create"`
		Value            int32  `json:"value"`
		PreemptionPolicy string `json:"preemptionPolicy"`
	} `json:"priorityClass"`
	PodDisruptionBudget struct {
		Enabled        bool   `json:"enabled"`
		MinAvailable   string `json:"minAvailable"`
		MaxUnavailable string `json:"maxUnavailable"`
	} `json:"podDisruptionBudget"`
	LeaderElection struct {
		LeaseDuration string `json:"leaseDuration"`
		RenewDeadline string `json:"renewDeadline"`
		RetryPeriod   string `json:"retryPeriod"`
	} `json:"leaderElection"`
	Proxy struct {
		HTTPProxy  string `json:"httpProxy"`
		HTTPSProxy string `json:"httpsProxy"`
		NoProxy    string `json:"noProxy,omitempty"`
	} `json:"proxy"`
	Internal struct {
		SystemNamespace string `json:"systemNamespace"`
	} `json:"internal"`
	// Direct is set only for a Cluster with spec.agentDirectEndpoint, so
	// the hash of every other agent stays what it was.
	Direct *Direct `json:"direct,omitempty"`
}

// Direct are the chart's direct values (the authorized cluster endpoint).
type Direct struct {
	Enabled     bool     `json:"enabled"`
	Mode        string   `json:"mode"`
	URL         string   `json:"url"`
	ServiceType string   `json:"serviceType"`
	NodePort    int32    `json:"nodePort"`
	HostPort    int32    `json:"hostPort"`
	Hosts       []string `json:"hosts"`
	// APIAudiences only when set, so the values of clusters that do not
	// set them stay what they were.
	APIAudiences []string `json:"apiAudiences,omitempty"`
}

// ErrNoAPIServerURL: the agent would not know where its upstream is.
var ErrNoAPIServerURL = errors.New("no upstream API server URL for the agent: set apiServerURL in the fleet-controller config, or key apiServerURL in the kubeconfig Secret")

// ForCluster returns the values the controller renders a
// Cluster's agent with: the controller configuration's agent settings, the
// Cluster's own (spec.agentEnvVars, agentTolerations, ...) and, with a
// bootstrap, what the first deploy's fleet-agent-bootstrap Secret carries.
// With bootstrap nil the values render the agent without its bootstrap
// Secret: the agent's own Bundle (manageagent), after registration. Every
// error names the field to fix; a missing upstream URL is ErrNoAPIServerURL,
// a plain http one the configuration does not allow a
// *config.InsecureAPIServerURLError.
func ForCluster(cluster *fleet.Cluster, cfg *config.Config, bootstrap *Bootstrap) (*Values, error) {
	if cfg == nil {
		cfg = &config.Config{}
	}
	v, errs := agentValues(cluster, cfg)
	if bootstrap != nil {
		errs = append(errs, v.setBootstrap(cfg, bootstrap)...)
		if v.APIServerURL == "" {
			errs = append(errs, ErrNoAPIServerURL)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

// ForToken returns the values file of a ClusterRegistrationToken,
// for `helm install fleet-agent charts/fleet-agent -f values.yaml`: the
// bootstrap (upstream URL and CA, the import bearer token, the names) and
// the controller configuration's agent settings, built as
// ForCluster builds them for a Cluster without agent settings of its own, which is what the registration makes. So the agent an admin
// installs with it renders the pod template its own Bundle applies after
// registration, and adoption restarts nothing. bearer "" gives
// TokenPlaceholder (offline rendering).
//
// A missing upstream URL is not an error here: the values Secret is written
// anyway and the token's status says what to set.
func ForToken(token *fleet.ClusterRegistrationToken, cfg *config.Config, bearer string) (*Values, error) {
	if cfg == nil {
		cfg = &config.Config{}
	}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: token.Namespace}, Spec: fleet.ClusterSpec{ClientID: token.Spec.ClientID}}
	v, errs := agentValues(c, cfg)
	errs = append(errs, v.setBootstrap(cfg, &Bootstrap{
		TokenName:                   token.Name,
		ClusterNamespace:            token.Namespace,
		SystemRegistrationNamespace: config.DefaultSystemRegistrationNS,
		Token:                       bearer,
	})...)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("token %s/%s: %w", token.Namespace, token.Name, err)
	}
	return v, nil
}

// Parse reads a values file (Values.YAML, or one written by
// an older controller: a token's values Secret holds the keys of the
// bootstrap, the image, TLS mode and check-in interval only). Keys it does
// not know are ignored, as Helm would reject them, not this.
func Parse(data []byte) (*Values, error) {
	v := &Values{}
	if err := yaml.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("parsing agent values: %w", err)
	}
	// JSON escapes can carry characters YAML cannot (a C1 control
	// character such as \u0080): refused here, not when the values are
	// written out for the agent.
	if _, err := v.YAML(); err != nil {
		return nil, fmt.Errorf("parsing agent values: a value holds characters YAML cannot carry (control characters?): %w", err)
	}
	return v, nil
}

// agentValues builds the values that come from the controller configuration
// and the Cluster's agent settings: everything but the bootstrap.
func agentValues(cluster *fleet.Cluster, cfg *config.Config) (*Values, []error) {
	spec := &cluster.Spec
	v := &Values{Labels: map[string]string{}, ImagePullSecrets: []corev1.LocalObjectReference{}, Env: []corev1.EnvVar{}, Tolerations: []corev1.Toleration{}}
	var errs []error

	v.Internal.SystemNamespace = AgentNamespace(cluster)
	v.ClientID = spec.ClientID
	v.AgentTLSMode = cfg.GetAgentTLSMode()
	v.CheckinInterval = ShortDuration(cfg.GetAgentCheckinInterval())
	v.Generation = spec.RedeployAgentGeneration
	v.SystemRegistrationNamespace = config.DefaultSystemRegistrationNS

	repo, tag, err := splitImage(cfg.GetAgentImage())
	if err != nil {
		errs = append(errs, err)
	}
	v.Image.Repository, v.Image.Tag = repo, tag
	v.Image.ImagePullPolicy = string(cfg.GetAgentImagePullPolicy())
	v.Global.Cattle.SystemDefaultRegistry = cfg.SystemDefaultRegistry
	v.PrivateRepoURL = spec.PrivateRepoURL

	if spec.AgentPullSecrets != nil {
		v.ImagePullSecrets = append(v.ImagePullSecrets, spec.AgentPullSecrets...)
	} else {
		for _, s := range cfg.AgentImagePullSecrets {
			v.ImagePullSecrets = append(v.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
		}
	}
	v.Replicas = cfg.GetAgentReplicas()

	for i, e := range spec.AgentEnvVars {
		if msg := validateEnvName(e.Name); msg != "" {
			errs = append(errs, fmt.Errorf("spec.agentEnvVars[%d].name %q %s", i, e.Name, msg))
		}
	}
	v.Env = append(v.Env, spec.AgentEnvVars...)

	v.Tolerations = append(v.Tolerations, spec.AgentTolerations...)
	sortTolerations(v.Tolerations)
	v.Affinity = spec.AgentAffinity
	v.Resources = spec.AgentResources
	v.HostNetwork = spec.HostNetwork != nil && *spec.HostNetwork

	v.PriorityClass.PreemptionPolicy = string(corev1.PreemptLowerPriority)
	v.PodDisruptionBudget.MaxUnavailable = "0"
	if sc := spec.AgentSchedulingCustomization; sc != nil {
		if pc := sc.PriorityClass; pc != nil {
			v.PriorityClass.Create = true
			v.PriorityClass.Value = pc.Value
			if pc.PreemptionPolicy != nil {
				v.PriorityClass.PreemptionPolicy = string(*pc.PreemptionPolicy)
			}
		}
		if pdb := sc.PodDisruptionBudget; pdb != nil {
			v.PodDisruptionBudget.Enabled = true
			v.PodDisruptionBudget.MinAvailable = pdb.MinAvailable
			if pdb.MaxUnavailable != "" {
				v.PodDisruptionBudget.MaxUnavailable = pdb.MaxUnavailable
			}
			if isNonZero(pdb.MinAvailable) && isNonZero(pdb.MaxUnavailable) {
				errs = append(errs, errors.New("spec.agentSchedulingCustomization.podDisruptionBudget: set either minAvailable or maxUnavailable, not both"))
			}
		}
	}

	if d := spec.AgentDirectEndpoint; d != nil {
		dv := &Direct{Enabled: true, Mode: d.Mode, URL: d.URL, ServiceType: d.ServiceType, NodePort: d.NodePort, HostPort: d.HostPort, Hosts: append([]string{}, d.Hosts...),
			APIAudiences: append([]string(nil), d.APIAudiences...)}
		if dv.Mode == "" {
			dv.Mode = "agent"
		}
		if dv.ServiceType == "" {
			dv.ServiceType = "ClusterIP"
		}
		if !strings.HasPrefix(d.URL, "https://") {
			errs = append(errs, fmt.Errorf("spec.agentDirectEndpoint.url %q: an https:// address where users reach the endpoint is required", d.URL))
		}
		v.Direct = dv
	}

	lease, renew, retry := cfg.GetAgentLeaderElection()
	v.LeaderElection.LeaseDuration, v.LeaderElection.RenewDeadline, v.LeaderElection.RetryPeriod = lease.String(), renew.String(), retry.String()
	v.Proxy.HTTPProxy, v.Proxy.HTTPSProxy, v.Proxy.NoProxy = cfg.AgentProxy.HTTPProxy, cfg.AgentProxy.HTTPSProxy, cfg.AgentProxy.NoProxy
	return v, errs
}

// setBootstrap adds the values of the fleet-agent-bootstrap Secret: the
// upstream URL and CA (the bootstrap's, else the configuration's), the
// names, and the import token (TokenPlaceholder when it has none).
func (v *Values) setBootstrap(cfg *config.Config, b *Bootstrap) []error {
	var errs []error
	v.Bootstrap.Enabled = true
	v.APIServerURL = cfg.APIServerURL
	if b.APIServerURL != "" {
		v.APIServerURL = b.APIServerURL
	}
	v.APIServerCA = string(cfg.APIServerCA)
	if len(b.APIServerCA) > 0 {
		v.APIServerCA = string(b.APIServerCA)
	}
	if err := cfg.CheckAPIServerURLScheme(v.APIServerURL); err != nil {
		errs = append(errs, err)
	}
	v.InsecureAPIServerURL = strings.HasPrefix(strings.ToLower(v.APIServerURL), "http://")
	v.TokenName = b.TokenName
	v.ClusterNamespace = b.ClusterNamespace
	if b.SystemRegistrationNamespace != "" {
		v.SystemRegistrationNamespace = b.SystemRegistrationNamespace
	}
	v.Token = b.Token
	if v.Token == "" {
		v.Token = TokenPlaceholder
	}
	return errs
}

// AgentNamespace returns the downstream namespace of a Cluster's agent.
func AgentNamespace(cluster *fleet.Cluster) string {
	if cluster.Spec.AgentNamespace != "" {
		return cluster.Spec.AgentNamespace
	}
	return config.DefaultSystemNamespace
}

// YAML returns the values as a values file. Keys are sorted, so the bytes
// are stable.
func (v *Values) YAML() ([]byte, error) {
	return yaml.Marshal(v)
}

// Hash returns a hash of the values. Computed on values with the token
// placeholder, it changes exactly when a value given to the agent changes.
// What decides a redeploy is renderer.AgentRenderer.Hash, which adds the
// chart.
func (v *Values) Hash() (string, error) {
	c := *v
	if c.Token != "" {
		c.Token = TokenPlaceholder
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ShortDuration spells d as people and the chart's defaults do ("1m", not
// Go's "1m0s"): the agent's env carries it, and a different spelling of the
// same interval between a helm-installed agent and its Bundle would restart
// the agent at adoption.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// splitImage splits "registry/repo:tag" into repository and tag.
func splitImage(ref string) (repo, tag string, err error) {
	if strings.Contains(ref, "@") {
		return "", "", fmt.Errorf("agentImage %q: digests are not supported, use repository:tag", ref)
	}
	i := strings.LastIndex(ref, ":")
	if i <= strings.LastIndex(ref, "/") || i == len(ref)-1 {
		return "", "", fmt.Errorf("agentImage %q must be repository:tag", ref)
	}
	return ref[:i], ref[i+1:], nil
}

// validateEnvName applies the API server's rule for environment variable
// names, so a bad name fails at render time with the field named.
func validateEnvName(name string) string {
	if name == "" {
		return "is empty: every environment variable needs a name"
	}
	if msgs := validation.IsRelaxedEnvVarName(name); len(msgs) > 0 {
		return "is not a valid environment variable name: " + strings.Join(msgs, "; ")
	}
	return ""
}

func isNonZero(s string) bool { return s != "" && s != "0" && s != "0%" }

// sortTolerations orders tolerations so the same set always renders the same
// bytes.
func sortTolerations(ts []corev1.Toleration) {
	key := func(t corev1.Toleration) string {
		secs := ""
		if t.TolerationSeconds != nil {
			secs = fmt.Sprint(*t.TolerationSeconds)
		}
		return strings.Join([]string{t.Key, string(t.Operator), t.Value, string(t.Effect), secs}, "\x00")
	}
	sort.SliceStable(ts, func(i, j int) bool { return key(ts[i]) < key(ts[j]) })
}

// ClientIDPlaceholder stands for the clientID the controller generates for a
// manager-initiated Cluster committed without one.
const ClientIDPlaceholder = "<fleet:client-id: generated by the controller; set spec.clientID to pin it>"

// Offline builds the values for a Cluster as committed in git,
// with no cluster access: what cannot be known offline is a placeholder
// starting with "<fleet:". withBootstrap selects the first-deploy form (with
// the fleet-agent-bootstrap Secret) over the agent's own Bundle.
func Offline(cluster *fleet.Cluster, cfg *config.Config, withBootstrap bool) (*Values, error) {
	c := cluster.DeepCopy()
	if c.Spec.ClientID == "" && c.Spec.KubeConfigSecret != "" {
		c.Spec.ClientID = ClientIDPlaceholder
	}
	var b *Bootstrap
	if withBootstrap {
		b = OfflineBootstrap(c)
	}
	return ForCluster(c, cfg, b)
}

// OfflineBootstrap is the bootstrap of a manager-initiated Cluster as far as
// it can be known without a cluster: everything but the token.
func OfflineBootstrap(cluster *fleet.Cluster) *Bootstrap {
	ns := cluster.Namespace
	if ns == "" {
		ns = "fleet-default"
	}
	return &Bootstrap{
		TokenName:                   names.ImportToken(cluster.Name),
		ClusterNamespace:            ns,
		SystemRegistrationNamespace: config.DefaultSystemRegistrationNS,
		Token:                       TokenPlaceholder,
	}
}
