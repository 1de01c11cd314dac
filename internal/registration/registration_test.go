package registration

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

func TestClusterLabels(t *testing.T) {
	requested := map[string]string{
		"env":                          "prod",
		"region":                       "eu",
		"example.com/team":             "a",
		fleet.CreatedByAgentPodLabel:   "fleet-agent-7d9",
		"fleet.cattle.io/cluster":      "other",
		"management.cattle.io/cluster": "c-m-1",
		"bad key":                      "x",
		"ok":                           "bad value!",
	}
	cfg := &config.Config{AgentLabelKeys: []string{"env", "example.com/*"}}
	kept, refused := ClusterLabels(requested, cfg.AgentLabelKeyAllowed, false)
	want := map[string]string{"env": "prod", "example.com/team": "a", fleet.CreatedByAgentPodLabel: "fleet-agent-7d9"}
	if !maps.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	wantRefused := []RefusedLabel{
		{"bad key", LabelInvalid},
		{"fleet.cattle.io/cluster", LabelReserved},
		{"management.cattle.io/cluster", LabelReserved},
		{"ok", LabelInvalid},
		{"region", LabelNotAllowed},
	}
	if len(refused) != len(wantRefused) {
		t.Fatalf("refused %v, want %v", refused, wantRefused)
	}
	for i := range refused {
		if refused[i] != wantRefused[i] {
			t.Errorf("refused[%d] = %v, want %v", i, refused[i], wantRefused[i])
		}
	}
	msg := DescribeRefusedLabels(refused)
	for _, s := range []string{`"region" (key not in agentLabelKeys)`, `"fleet.cattle.io/cluster", "management.cattle.io/cluster" (reserved prefix)`} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}

	// No allow-list: every valid, unreserved key.
	kept, _ = ClusterLabels(requested, (&config.Config{}).AgentLabelKeyAllowed, false)
	if len(kept) != 4 || kept["region"] != "eu" {
		t.Errorf("without agentLabelKeys kept %v", kept)
	}
	kept, refused = ClusterLabels(requested, nil, true)
	if len(kept) != 0 || len(refused) != len(requested) {
		t.Errorf("ignoring labels kept %v, refused %d", kept, len(refused))
	}
}

func TestDescribeRefusedLabels_Bounded(t *testing.T) {
	var refused []RefusedLabel
	for i := range 500 {
		refused = append(refused, RefusedLabel{Key: strings.Repeat("k", 1000) + string(rune('a'+i%26)), Reason: LabelNotAllowed})
	}
	msg := DescribeRefusedLabels(refused)
	if len(msg) > 1200 || !strings.HasSuffix(msg, "and 490 more") {
		t.Errorf("message of %d bytes: %.200s...%s", len(msg), msg, msg[max(0, len(msg)-40):])
	}
	if DescribeRefusedLabels(nil) != "" {
		t.Error("nothing refused must describe as empty")
	}
}

// FuzzClusterLabels feeds agent-chosen labels and an agentLabelKeys entry
// through the filter: it never panics, never lets a reserved or invalid
// label through, never lets a key through that agentLabelKeys rejects, and
// accounts for every requested key exactly once.
func FuzzClusterLabels(f *testing.F) {
	f.Add("env", "prod", "fleet.cattle.io/cluster", "x", "env", false)
	f.Add("example.com/region", "eu", "management.cattle.io/x", "", "example.com/*", false)
	f.Add(fleet.CreatedByAgentPodLabel, "pod", "bad key", "v", "team-*", false)
	f.Add("a", "b", "c", "d", "", true)
	f.Add("fleet.cattle.io.example.com/x", "y", "x/y/z", "\x00", "*", false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, pattern string, ignore bool) {
		cfg := &config.Config{}
		if pattern != "" {
			cfg.AgentLabelKeys = []string{pattern}
			if cfg.Validate() != nil {
				cfg.AgentLabelKeys = nil
			}
		}
		requested := map[string]string{k1: v1, k2: v2}
		kept, refused := ClusterLabels(requested, cfg.AgentLabelKeyAllowed, ignore)
		if len(kept)+len(refused) != len(requested) {
			t.Fatalf("%d kept + %d refused for %d requested", len(kept), len(refused), len(requested))
		}
		for _, r := range refused {
			if _, ok := kept[r.Key]; ok {
				t.Fatalf("%q both kept and refused", r.Key)
			}
		}
		if ignore && len(kept) > 0 {
			t.Fatalf("kept %v with ignore set", kept)
		}
		for k, v := range kept {
			if ReservedLabel(k) {
				t.Fatalf("reserved key %q kept", k)
			}
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				t.Fatalf("invalid label %q=%q kept", k, v)
			}
			if k != fleet.CreatedByAgentPodLabel && !cfg.AgentLabelKeyAllowed(k) {
				t.Fatalf("key %q kept though agentLabelKeys %v rejects it", k, cfg.AgentLabelKeys)
			}
			if v != requested[k] {
				t.Fatalf("value of %q changed", k)
			}
		}
		if msg := DescribeRefusedLabels(refused); len(refused) > 0 && msg == "" {
			t.Fatalf("description %q of %v", msg, refused)
		}
	})
}

// clusterLabelsWith are the labels of Cluster "cluster-x" made for a
// registration asking for requested, under cfg, as the registration
// reconciler makes them.
func clusterLabelsWith(requested map[string]string, cfg *config.Config) map[string]string {
	return NewClusterLabels(requested, "cluster-x", cfg.AgentLabelKeyAllowed, cfg.IgnoreClusterRegistrationLabels)
}

func TestNewClusterLabels(t *testing.T) {
	requested := map[string]string{
		"env":                              "prod",
		"example.com/team":                 "a",
		fleet.CreatedByAgentPodLabel:       "fleet-agent-0",
		"fleet.cattle.io/cluster":          "spoofed",
		"fleet.cattle.io/shard-id":         "s1",
		"management.cattle.io/cluster-id":  "c-123",
		"bad key with spaces":              "x",
		"ok":                               "bad value with spaces",
		"long":                             strings.Repeat("v", 64),
		"fleet.cattle.io.example.com/fine": "yes",
	}
	want := map[string]string{
		"env":                              "prod",
		"example.com/team":                 "a",
		fleet.CreatedByAgentPodLabel:       "fleet-agent-0",
		fleet.ClusterLabel:                 "cluster-x",
		"fleet.cattle.io.example.com/fine": "yes",
	}
	if got := clusterLabelsWith(requested, &config.Config{}); !maps.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got := clusterLabelsWith(requested, &config.Config{IgnoreClusterRegistrationLabels: true}); !maps.Equal(got, map[string]string{fleet.ClusterLabel: "cluster-x"}) {
		t.Errorf("ignoring agent labels: got %v", got)
	}
	restricted := &config.Config{AgentLabelKeys: []string{"env", "fleet.cattle.io/*"}}
	want = map[string]string{"env": "prod", fleet.CreatedByAgentPodLabel: "fleet-agent-0", fleet.ClusterLabel: "cluster-x"}
	if got := clusterLabelsWith(requested, restricted); !maps.Equal(got, want) {
		t.Errorf("agentLabelKeys %v: got %v\nwant %v (reserved keys stay out even when listed)", restricted.AgentLabelKeys, got, want)
	}
}

// FuzzNewClusterLabels: whatever an agent asks for and whatever
// agentLabelKeys says, the Cluster's own label is never overridden and no
// other reserved or not allowed key gets through. (FuzzClusterLabels
// fuzzes the filter itself.)
func FuzzNewClusterLabels(f *testing.F) {
	f.Add("env", "prod", "")
	f.Add("fleet.cattle.io/cluster", "x", "fleet.cattle.io/*")
	f.Add("management.cattle.io/a", "b", "management.cattle.io/a")
	f.Add("a/b/c", "", "a*")
	f.Add("example.com/team", "a", "example.com/*")
	f.Fuzz(func(t *testing.T, k, v, pattern string) {
		cfg := &config.Config{AgentLabelKeys: []string{pattern}}
		if pattern == "" || cfg.Validate() != nil {
			cfg.AgentLabelKeys = nil
		}
		got := clusterLabelsWith(map[string]string{k: v}, cfg)
		if got[fleet.ClusterLabel] != "cluster-x" {
			t.Fatalf("cluster label overridden: %v", got)
		}
		for key := range got {
			if key == fleet.ClusterLabel || key == fleet.CreatedByAgentPodLabel {
				continue
			}
			if ReservedLabel(key) || !cfg.AgentLabelKeyAllowed(key) {
				t.Fatalf("label %q kept with agentLabelKeys %v: %v", key, cfg.AgentLabelKeys, got)
			}
		}
	})
}

func TestParseBootstrap(t *testing.T) {
	good := map[string][]byte{
		BootstrapKeyAPIServerURL:                []byte("https://upstream.example.com:6443\n"),
		BootstrapKeyAPIServerCA:                 []byte("ca"),
		BootstrapKeyClusterNamespace:            []byte("fleet-default"),
		BootstrapKeySystemRegistrationNamespace: []byte("cattle-fleet-clusters-system"),
		BootstrapKeyToken:                       []byte("eyJhbGciOi.x.y"),
		BootstrapKeyTokenName:                   []byte("edge"),
	}
	b, err := ParseBootstrap(good)
	if err != nil {
		t.Fatal(err)
	}
	if b.APIServerURL != "https://upstream.example.com:6443" || b.TokenName != "edge" || string(b.APIServerCA) != "ca" {
		t.Errorf("parsed %+v", b)
	}
	for name, tc := range map[string]struct {
		key, value, want string
	}{
		"no token":        {BootstrapKeyToken, "", "missing token"},
		"no URL":          {BootstrapKeyAPIServerURL, "", "missing apiServerURL"},
		"relative URL":    {BootstrapKeyAPIServerURL, "upstream:6443", "apiServerURL is not an absolute http(s) URL"},
		"bad namespace":   {BootstrapKeyClusterNamespace, "Fleet Default", `clusterNamespace "Fleet Default" is not a namespace name`},
		"bad token name":  {BootstrapKeyTokenName, "a/b", `tokenName "a/b" is not a ClusterRegistrationToken name`},
		"token with a \n": {BootstrapKeyToken, "abc\ndef", "token is not a bearer token"},
	} {
		data := maps.Clone(good)
		data[tc.key] = []byte(tc.value)
		_, err := ParseBootstrap(data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "eyJhbGciOi") {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
	if _, err := ParseBootstrap(nil); err == nil || !strings.Contains(err.Error(), "missing apiServerURL, clusterNamespace, systemRegistrationNamespace, token, tokenName") {
		t.Errorf("empty Secret: %v", err)
	}
}

// FuzzParseBootstrap feeds arbitrary bootstrap Secret data to the agent's
// parser: it never panics, accepts only complete, well-formed data, and
// never puts the token into an error.
func FuzzParseBootstrap(f *testing.F) {
	f.Add("https://upstream.example.com:6443", "fleet-default", "cattle-fleet-clusters-system", "secret-token-value", "edge")
	f.Add("", "", "", "", "")
	f.Add("http://[::1]:6443", "a", "b", "t t", "x")
	f.Add("https://%zz", "ns-", "UPPER", "tok", "name/with/slash")
	f.Fuzz(func(t *testing.T, url, ns, sysNS, token, tokenName string) {
		b, err := ParseBootstrap(map[string][]byte{
			BootstrapKeyAPIServerURL:                []byte(url),
			BootstrapKeyClusterNamespace:            []byte(ns),
			BootstrapKeySystemRegistrationNamespace: []byte(sysNS),
			BootstrapKeyToken:                       []byte(token),
			BootstrapKeyTokenName:                   []byte(tokenName),
		})
		if err != nil {
			if b != nil {
				t.Fatal("both a result and an error")
			}
			// The names are quoted in errors; a token equal to (a part of)
			// one of them, as written or as quoted (escapes add digits),
			// proves nothing.
			others := url + ns + sysNS + tokenName + fmt.Sprintf("%q%q%q%q", url, ns, sysNS, tokenName)
			if tok := strings.TrimSpace(token); len(tok) >= 8 && strings.Contains(err.Error(), tok) && !strings.Contains(others, tok) {
				t.Fatalf("error %q shows the token", err)
			}
			return
		}
		if b.APIServerURL == "" || b.Token == "" || b.TokenName == "" || b.ClusterNamespace == "" || b.SystemRegistrationNamespace == "" {
			t.Fatalf("accepted incomplete bootstrap %+v", b)
		}
		if len(validation.IsDNS1123Label(b.ClusterNamespace)) > 0 || len(validation.IsValidLabelValue(b.TokenName)) > 0 {
			t.Fatalf("accepted invalid names %+v", b)
		}
	})
}
