package config

import (
	"strings"
	"testing"
	"time"
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
