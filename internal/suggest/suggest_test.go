package suggest

import "testing"

func TestNearest(t *testing.T) {
	for _, tt := range []struct {
		typed      string
		candidates []string
		want       string
	}{
		{"agentTLSmode", []string{"agentTLSMode", "agentNamespace"}, "agentTLSMode"},
		{"agentToleration", []string{"agentTolerations", "agentAffinity"}, "agentTolerations"},
		{"clster", []string{"cluster", "config", "context"}, "cluster"},
		{"bse", []string{"base", "head", "path"}, "base"},
		{"clusterNme", []string{"clusterName", "clusterGroup", "clusterSelector"}, "clusterName"},
		{"deev", []string{"dev", "prod"}, "dev"},
		{"contxet", []string{"context", "config"}, "context"}, // a swap is one edit
		{"replicas", []string{"image", "agent"}, ""},          // nothing near: no guess
		{"x", []string{"y"}, ""},                              // no letter in common: no guess
		{"hed", []string{"head"}, "head"},                     // short names: up to two edits
		{"same", []string{"same"}, ""},                        // not a suggestion of itself
	} {
		if got := Nearest(tt.typed, tt.candidates); got != tt.want {
			t.Errorf("Nearest(%q, %v) = %q, want %q", tt.typed, tt.candidates, got, tt.want)
		}
	}
}
