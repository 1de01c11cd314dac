package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func TestParse_Defaults(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetAgentTLSMode() != TLSModeSystemStore || cfg.GetAgentCheckinInterval() != time.Minute ||
		cfg.GetImportTokenTTL() != 12*time.Hour || cfg.GetAgentReplicas() != 1 || !cfg.GetManageAgent() ||
		cfg.GetOfflineAfterMissedHeartbeats() != 3 || cfg.GetRequestCredentialTTL() != 24*time.Hour {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
}

func TestParse_RejectsBadConfigNamingTheField(t *testing.T) {
	cases := map[string]string{
		`{"apiServerURL": "fleet.example.com"}`:             "apiServerURL \"fleet.example.com\" must be an absolute http(s) URL",
		`{"agentTLSMode": "lax"}`:                           `agentTLSMode "lax" must be "system-store" or "strict"`,
		`{"agentCheckinInterval": "soon"}`:                  "agentCheckinInterval",
		`{"agentcheckinInterval": "1m"}`:                    `unknown field "agentcheckinInterval"`,
		`{"agentImagePullPolicy": "Sometimes"}`:             "agentImagePullPolicy",
		`{"requestCredentialTTL": "1m"}`:                    "below the 10m minimum",
		`{"agentLeaderElection": {"leaseDuration": "-1s"}}`: "agentLeaderElection.leaseDuration must not be negative",
		"apiServerURL: [":                                   "not valid YAML",
	}
	for in, want := range cases {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestParse_YAMLAndCABase64(t *testing.T) {
	cfg, err := Parse([]byte("apiServerURL: https://up.example.com:6443\napiServerCA: Y2E=\nagentCheckinInterval: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.APIServerCA) != "ca" || cfg.GetAgentCheckinInterval() != 30*time.Second {
		t.Errorf("got %+v", cfg)
	}
}

func TestCAPI_OptIn(t *testing.T) {
	prod := map[string]string{"fleet": "enabled", "env": "prod"}
	cases := []struct {
		cfg    string
		ns     string
		labels map[string]string
		want   bool
	}{
		{``, "capi", prod, false}, // off by default
		{`capiNamespaces: [capi]`, "capi", nil, true},
		{`capiNamespaces: [capi]`, "other", prod, false},
		{`capiNamespaces: ["*"]`, "anywhere", nil, true},
		{`capiClusterSelector: fleet=enabled`, "anywhere", prod, true},
		{`capiClusterSelector: fleet=enabled`, "anywhere", map[string]string{"env": "prod"}, false},
		{`{capiNamespaces: [capi], capiClusterSelector: "fleet=enabled,env in (prod)"}`, "capi", prod, true},
		{`{capiNamespaces: [capi], capiClusterSelector: fleet=enabled}`, "other", prod, false},
		{`{capiNamespaces: [capi], capiClusterSelector: fleet=enabled}`, "capi", nil, false},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(c.cfg))
		if err != nil {
			t.Fatalf("%s: %v", c.cfg, err)
		}
		if got := cfg.CAPISelects(c.ns, c.labels); got != c.want {
			t.Errorf("%s: CAPISelects(%s, %v) = %v, want %v", c.cfg, c.ns, c.labels, got, c.want)
		}
	}
}

func TestCAPI_BadOptInIsRejected(t *testing.T) {
	for in, want := range map[string]string{
		`capiNamespaces: [Not_A_Namespace]`: `capiNamespaces: "Not_A_Namespace" is not a namespace name`,
		`capiClusterSelector: "a=(b"`:       `capiClusterSelector "a=(b" is not a label selector`,
		`capiNamespace: [x]`:                `unknown field "capiNamespace"`,
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestKubeConfigSecretNamespaceAllowed_OwnNamespaceUnlessListed(t *testing.T) {
	cfg := &Config{KubeConfigSecretNamespaces: map[string][]string{
		"team-a": {"shared-kubeconfigs"},
		"*":      {"capi-secrets"},
	}}
	cases := []struct {
		workspace, secretNS string
		want                bool
	}{
		{"team-a", "", true},
		{"team-a", "team-a", true},
		{"team-a", "shared-kubeconfigs", true},
		{"team-b", "shared-kubeconfigs", false}, // listed for team-a only
		{"team-b", "capi-secrets", true},        // listed for every workspace
		// What the old prefix rule let through: another workspace's Secrets.
		{"team-a", "fleet-default", false},
		{"team-a", "cattle-fleet-system", false},
		{"team-a", "cluster-x", false},
		{"team-a", "kube-system", false},
	}
	for _, tc := range cases {
		if got := cfg.KubeConfigSecretNamespaceAllowed(tc.workspace, tc.secretNS); got != tc.want {
			t.Errorf("%s -> %s: got %v, want %v", tc.workspace, tc.secretNS, got, tc.want)
		}
	}
	if (&Config{}).KubeConfigSecretNamespaceAllowed("fleet-local", "fleet-default") {
		t.Error("the default configuration lets a workspace read another workspace's kubeconfig")
	}
}

func TestValidate_HTTPAPIServerURLNeedsTheOptIn(t *testing.T) {
	_, err := Parse([]byte(`{"apiServerURL": "http://upstream.example.com"}`))
	if err == nil || !strings.Contains(err.Error(), "allowInsecureAPIServerURL") {
		t.Errorf("http apiServerURL without opt-in: %v", err)
	}
	if _, err := Parse([]byte(`{"apiServerURL": "http://upstream.example.com", "allowInsecureAPIServerURL": true}`)); err != nil {
		t.Errorf("http apiServerURL with opt-in: %v", err)
	}
	if _, err := Parse([]byte(`{"kubeConfigSecretNamespaces": {"team-a": ["Not_A_Namespace"]}}`)); err == nil {
		t.Error("an invalid namespace in kubeConfigSecretNamespaces was accepted")
	}
}

// TestCheckAPIServerURLScheme_OnlyAbsoluteHTTPS: an upstream URL for
// agents (the configuration's, or a kubeconfig Secret's apiServerURL key)
// is an absolute https:// URL, or http:// with allowInsecureAPIServerURL;
// a URL without a scheme is refused whatever the switch (clients dial it as
// plain http), with a message that says what to write.
func TestCheckAPIServerURLScheme_OnlyAbsoluteHTTPS(t *testing.T) {
	cases := []struct {
		url string
		// want: "ok", "http" (an InsecureAPIServerURLError, accepted
		// with the switch), "invalid" (refused either way)
		want string
	}{
		{"", "ok"},
		{"https://up.example.com:6443", "ok"},
		{"https://[fd00::1]:6443", "ok"},
		{"http://up.example.com", "http"},
		{"HTTP://up.example.com", "http"},
		{"10.0.0.5:8080", "invalid"},
		{"up.example.com", "invalid"},
		{"up.example.com:6443", "invalid"},
		{"//up.example.com", "invalid"},
		{"[fd00::1]:6443", "invalid"},
		{"unix:///var/run/kubernetes.sock", "invalid"},
		{"https://", "invalid"},
	}
	for _, tc := range cases {
		for _, allow := range []bool{false, true} {
			err := (&Config{AllowInsecureAPIServerURL: allow}).CheckAPIServerURLScheme(tc.url)
			var insecure *InsecureAPIServerURLError
			switch {
			case tc.want == "ok" || (tc.want == "http" && allow):
				if err != nil {
					t.Errorf("%q (allow %v): %v", tc.url, allow, err)
				}
			case tc.want == "http":
				if !errors.As(err, &insecure) || !strings.Contains(err.Error(), "allowInsecureAPIServerURL") {
					t.Errorf("%q: %v, want an InsecureAPIServerURLError naming the switch", tc.url, err)
				}
			default:
				if err == nil || errors.As(err, &insecure) || !strings.Contains(err.Error(), "https://") {
					t.Errorf("%q (allow %v): %v, want a refusal saying to write https://", tc.url, allow, err)
				}
			}
		}
	}
}

func TestAgentLabelKeys(t *testing.T) {
	cfg, err := Parse([]byte(`{"agentLabelKeys": ["env", "example.com/*", "team-*"]}`))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{
		"env": true, "example.com/region": true, "example.com/": true, "team-a": true,
		"envx": false, "region": false, "sub.example.com/region": false, "example.org/region": false, "team": false,
	} {
		if got := cfg.AgentLabelKeyAllowed(key); got != want {
			t.Errorf("AgentLabelKeyAllowed(%q) = %v, want %v", key, got, want)
		}
	}
	if !(&Config{}).AgentLabelKeyAllowed("anything") {
		t.Error("an empty agentLabelKeys must allow every key")
	}
	for in, want := range map[string]string{
		`{"agentLabelKeys": ["*"]}`:           "would allow every key",
		`{"agentLabelKeys": ["ex*ample/*"]}`:  "only a trailing *",
		`{"agentLabelKeys": ["a/b/*"]}`:       `no label key starts with "a/b/"`,
		`{"agentLabelKeys": ["Bad Key"]}`:     `"Bad Key" is not a label key`,
		`{"agentLabelKeys": ["-team*"]}`:      `no label key starts with "-team"`,
		`{"agentLabelKeys": "env"}`:           "agentLabelKeys",
		`{"agentLabelKeys": ["ok", "x/y/z"]}`: `"x/y/z" is not a label key`,
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestParse_BundleRenderingLimits(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetBundleMaxSize() != 32<<20 || cfg.GetBundleMaxResourceSize() != 16<<20 || cfg.GetBundleRenderTimeout() != 30*time.Second ||
		cfg.GetBundleRenderMemoryLimit() != 256<<20 || cfg.GetBundleRenderConcurrency() != 2 {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = Parse([]byte("bundleMaxSize: 64Mi\nbundleMaxResourceSize: 1048576\nbundleRenderTimeout: 2m\nbundleRenderMemoryLimit: 1Gi\nbundleRenderConcurrency: 8\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetBundleMaxSize() != 64<<20 || cfg.GetBundleMaxResourceSize() != 1<<20 || cfg.GetBundleRenderTimeout() != 2*time.Minute ||
		cfg.GetBundleRenderMemoryLimit() != 1<<30 || cfg.GetBundleRenderConcurrency() != 8 {
		t.Errorf("set: %+v", cfg)
	}
	for in, want := range map[string]string{
		`bundleMaxSize: 32MB`:             `bundleMaxSize "32MB" is not a quantity such as 32Mi or 512Ki`,
		`bundleMaxResourceSize: 0`:        "bundleMaxResourceSize 0 must be positive",
		`bundleRenderMemoryLimit: 16Mi`:   "bundleRenderMemoryLimit 16Mi is below the 64Mi minimum",
		`bundleRenderTimeout: soon`:       `bundleRenderTimeout "soon" is not a Go duration`,
		`bundleRenderTimeout: -1s`:        "bundleRenderTimeout must not be negative",
		`bundleRenderConcurrency: -1`:     "bundleRenderConcurrency -1 must be between 1 and 64",
		`bundleRenderConcurrencies: 1`:    `unknown field "bundleRenderConcurrencies"`,
		`{bundleMaxSize: "-1Mi", x: 1}`:   "unknown field",
		`bundleRenderMemoryLimit: "-1Gi"`: "bundleRenderMemoryLimit -1Gi must be positive",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestOfflineAfter(t *testing.T) {
	if got := (&Config{}).OfflineAfter(); got != 3*time.Minute {
		t.Errorf("default OfflineAfter %s, want 3m", got)
	}
	cfg := &Config{OfflineAfterMissedHeartbeats: 2}
	cfg.AgentCheckinInterval.Duration = 10 * time.Second
	if got := cfg.OfflineAfter(); got != 20*time.Second {
		t.Errorf("OfflineAfter %s, want 20s", got)
	}
}

func TestBootstrap_OnByDefaultWithFleetNames(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.BootstrapEnabled() || cfg.GetBootstrapNamespace() != "fleet-local" || cfg.GetBootstrapAgentNamespace() != "cattle-fleet-system" {
		t.Errorf("defaults: enabled %v, namespace %q, agentNamespace %q", cfg.BootstrapEnabled(), cfg.GetBootstrapNamespace(), cfg.GetBootstrapAgentNamespace())
	}
	cfg, err = Parse([]byte(`{"bootstrap": {"enabled": false, "namespace": "mgmt", "agentNamespace": "fleet-local-agent"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BootstrapEnabled() || cfg.GetBootstrapNamespace() != "mgmt" || cfg.GetBootstrapAgentNamespace() != "fleet-local-agent" {
		t.Errorf("set: %+v", cfg.Bootstrap)
	}
}

func TestBootstrap_BadNamespacesAreRejected(t *testing.T) {
	for in, want := range map[string]string{
		`{"bootstrap": {"namespace": "Fleet_Local"}}`:   `bootstrap.namespace "Fleet_Local" is not a namespace name`,
		`{"bootstrap": {"agentNamespace": "a/b"}}`:      `bootstrap.agentNamespace "a/b" is not a namespace name`,
		`{"bootstrap": {"enabled": true, "repo": "x"}}`: `unknown field "bootstrap.repo"`,
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", in, err, want)
		}
	}
}

// TestValidate_CanarySelectorOnKeysAgentsMaySetIsRefused: a registration
// token's holder picks the labels of the Cluster its agent registers
// (within agentLabelKeys), so a canary selected on such a key would let it
// put its cluster into the canary, or keep it out, and stall or falsely
// pass every agent rollout. Every key of the selector counts, whatever the
// operator; the message names the key and the fix.
func TestValidate_CanarySelectorOnKeysAgentsMaySetIsRefused(t *testing.T) {
	cases := []struct {
		name, doc string
		refused   string // the key named in the error; "": accepted
	}{
		{"matchLabels, any key allowed", `{"agentRollout": {"canary": {"selector": {"matchLabels": {"canary": "true"}}}}}`, "canary"},
		{"matchExpressions In", `{"agentRollout": {"canary": {"selector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["canary"]}]}}}}`, "env"},
		{"DoesNotExist steers as well", `{"agentRollout": {"canary": {"selector": {"matchExpressions": [{"key": "stable", "operator": "DoesNotExist"}]}}}}`, "stable"},
		{"a key agentLabelKeys lists", `{"agentLabelKeys": ["env", "example.com/*"], "agentRollout": {"canary": {"selector": {"matchLabels": {"env": "canary"}}}}}`, "env"},
		{"a key under a listed prefix", `{"agentLabelKeys": ["env", "example.com/*"], "agentRollout": {"canary": {"selector": {"matchLabels": {"example.com/ring": "0"}}}}}`, "example.com/ring"},
		{"the label agents set themselves", `{"agentLabelKeys": ["env"], "agentRollout": {"canary": {"selector": {"matchLabels": {"fleet.cattle.io/created-by-agent-pod": "x"}}}}}`, "fleet.cattle.io/created-by-agent-pod"},
		{"one of two keys", `{"agentLabelKeys": ["env"], "agentRollout": {"canary": {"selector": {"matchLabels": {"tier": "canary", "env": "dev"}}}}}`, "env"},
		{"a key outside agentLabelKeys", `{"agentLabelKeys": ["env", "example.com/*"], "agentRollout": {"canary": {"selector": {"matchLabels": {"tier": "canary"}, "matchExpressions": [{"key": "ring", "operator": "Exists"}]}}}}`, ""},
		{"a reserved key", `{"agentRollout": {"canary": {"selector": {"matchLabels": {"management.cattle.io/canary": "true"}}}}}`, ""},
		{"agent labels ignored", `{"ignoreClusterRegistrationLabels": true, "agentRollout": {"canary": {"selector": {"matchLabels": {"canary": "true"}}}}}`, ""},
		{"by count", `{"agentRollout": {"canary": {"count": 2}}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range []string{"agentRollout.canary.selector", fmt.Sprintf("%q", tc.refused), "agentLabelKeys", "canary.count"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %s: %v", want, err)
				}
			}
		})
	}
}

// TestAgentMaySetLabel_IsTheRegistrationRule: the configuration's rule for
// one key is exactly what registration.ClusterLabels keeps (the labels a
// registration gives a new Cluster), for every kind of key and setting.
func TestAgentMaySetLabel_IsTheRegistrationRule(t *testing.T) {
	keys := []string{"env", "region", "tier", "example.com/ring", "example.org/x", "team-a", "fleet.cattle.io/canary",
		"management.cattle.io/x", fleet.CreatedByAgentPodLabel, "kubernetes.io/hostname"}
	for _, cfg := range []*Config{
		{},
		{AgentLabelKeys: []string{"env", "example.com/*", "team-*"}},
		{AgentLabelKeys: []string{"tier"}},
		{IgnoreClusterRegistrationLabels: true},
		{AgentLabelKeys: []string{"env"}, IgnoreClusterRegistrationLabels: true},
	} {
		for _, k := range keys {
			kept, _ := registration.ClusterLabels(map[string]string{k: "v"}, cfg.AgentLabelKeyAllowed, cfg.IgnoreClusterRegistrationLabels)
			_, registered := kept[k]
			if got := cfg.AgentMaySetLabel(k); got != registered {
				t.Errorf("agentLabelKeys %q, ignore %v, key %q: AgentMaySetLabel %v, but registration keeps it: %v",
					cfg.AgentLabelKeys, cfg.IgnoreClusterRegistrationLabels, k, got, registered)
			}
		}
	}
}
