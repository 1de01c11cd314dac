package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// closedPortKubeconfig writes a kubeconfig whose one context, "up", points
// at a port nothing listens on.
func closedPortKubeconfig(t *testing.T) (path, server string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server = "https://" + l.Addr().String()
	_ = l.Close() // connection refused from now on
	return writeFile(t, t.TempDir(), "kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: up
  context: {cluster: c, user: u}
current-context: up
`, server)), server
}

// TestUpstreamCommands_OneWordingForAMissingOrUnreachableUpstream: every
// command that talks to the upstream (fleet kubeconfig, fleet rollout,
// fleet diff --live) says the same of a kubeconfig without a context (where
// it looked, what to point it at; no client-go KUBERNETES_MASTER hint), of a
// context that is not there (the contexts there are), and of an upstream
// that does not answer (its server, the context, "is your kubeconfig's
// context the fleet upstream"). fleet rollout exits 2 for them ("could not
// ask"), apart from 1 for a halted rollout.
func TestUpstreamCommands_OneWordingForAMissingOrUnreachableUpstream(t *testing.T) {
	closed, server := closedPortKubeconfig(t)
	empty := writeFile(t, t.TempDir(), "kubeconfig", "apiVersion: v1\nkind: Config\n")
	t.Setenv("HOME", t.TempDir()) // no ~/.kube/config
	t.Setenv("KUBECONFIG", "")
	dir := t.TempDir()
	side := writeFile(t, dir, "side/cluster.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata: {name: dev-1, namespace: fleet-default}\nspec: {}\n")
	sideDir := strings.TrimSuffix(side, "/cluster.yaml")

	commands := map[string][]string{
		"rollout status":        {"rollout", "status"},
		"rollout status --wait": {"rollout", "status", "--wait", "5s"},
		"rollout pause":         {"rollout", "pause"},
		"kubeconfig":            {"kubeconfig", "--cluster", "fleet-default/dev-1"},
		"diff --live":           {"diff", "--base", sideDir, "--head", sideDir, "--live"},
		"uninstall":             {"uninstall", "--dry-run"},
	}
	wantCode := map[string]int{"rollout status": 2, "rollout status --wait": 2, "rollout pause": 2, "kubeconfig": 1, "diff --live": 2, "uninstall": 1}
	for name, args := range commands {
		t.Run(name, func(t *testing.T) {
			for _, tt := range []struct {
				what string
				args []string
				want []string
			}{
				{"no kubeconfig at all", nil, []string{"your kubeconfig has no context (looked at --kubeconfig, $KUBECONFIG, ~/.kube/config): point it at the upstream (fleet management) cluster"}},
				{"a kubeconfig without a context", []string{"--kubeconfig", empty}, []string{"your kubeconfig has no context (looked at --kubeconfig, $KUBECONFIG, ~/.kube/config)"}},
				{"a context that is not there", []string{"--kubeconfig", closed, "--context", "nope"}, []string{`your kubeconfig has no context "nope"`, "its contexts: up"}},
			} {
				code, _, stderr := runMain(t, append(append([]string{}, args...), tt.args...)...)
				if code != wantCode[name] {
					t.Errorf("%s: exit %d, want %d; stderr %q", tt.what, code, wantCode[name], stderr)
				}
				for _, w := range tt.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("%s: stderr %q lacks %q", tt.what, stderr, w)
					}
				}
				if strings.Contains(stderr, "KUBERNETES_MASTER") {
					t.Errorf("%s: stderr %q has client-go's stale hint", tt.what, stderr)
				}
			}
			if name == "diff --live" || name == "uninstall" {
				return // diff: nothing to ask when no cluster's agent is deployed again; uninstall: its requests name what they ask for
			}
			code, _, stderr := runMain(t, append(append([]string{}, args...), "--kubeconfig", closed)...)
			want := fmt.Sprintf("cannot reach the upstream API server %s (context \"up\" of your kubeconfig)", server)
			if code != wantCode[name] || !strings.Contains(stderr, want) || !strings.Contains(stderr, "connection refused") ||
				!strings.Contains(stderr, "is your kubeconfig's context the fleet upstream (management) cluster?") {
				t.Errorf("a closed port: exit %d, stderr %q; want %d with %q, the cause and the upstream question", code, stderr, wantCode[name], want)
			}
		})
	}
}
