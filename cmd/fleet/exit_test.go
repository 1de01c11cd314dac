package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runMain runs a command line as main does (execute: run, print the error,
// return the exit status) and returns its exit status, stdout and stderr.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = execute(t.Context(), root, args, &errOut)
	return code, out.String(), errOut.String()
}

// TestExitStatus_UsageErrorsExit2AndSayWhatWasMeant: a command line that
// cannot run (unknown, misspelt or missing flag, unknown subcommand, extra
// argument, bad format) exits 2 on every command, with the error on stderr,
// the flag or command that was likely meant, and where to read the usage;
// a command's own failure exits 1 with its message printed.
func TestExitStatus_UsageErrorsExit2AndSayWhatWasMeant(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"diff", "--base", "base"}, 2, []string{`required flag(s) "head" not set`, "(see 'fleet diff --help')"}},
		{[]string{"diff", "--bse", "x", "--head", "y"}, 2, []string{"unknown flag: --bse, did you mean --base?"}},
		{[]string{"diff", "--base", "x", "--head", "y", "extra"}, 2, []string{`unknown command "extra" for "fleet diff"`}},
		{[]string{"diff", "--base", "x", "--head", "y", "-o", "html"}, 2, []string{`-o/--output must be text, markdown or json, not "html"`}},
		{[]string{"kubeconfig", "--clster", "a/b"}, 2, []string{"unknown flag: --clster, did you mean --cluster?", "fleet kubeconfig --help"}},
		{[]string{"rollout", "status", "--wiat", "1s"}, 2, []string{"did you mean --wait?"}},
		{[]string{"rollout", "status", "-o", "yaml"}, 2, []string{`must be text or json, not "yaml"`}},
		{[]string{"rollout", "stauts"}, 2, []string{`unknown command "stauts" for "fleet rollout", did you mean "status"?`}},
		{[]string{"render", "agnt"}, 2, []string{`unknown command "agnt" for "fleet render", did you mean "agent"?`}},
		{[]string{"rendr"}, 2, []string{`unknown command "rendr" for "fleet"`, "render"}},
		{[]string{"render", "agent", "-o", "yaml", "--cluster", "x.yaml"}, 2, []string{`must be values (the values file, YAML) or manifests`}},
		{[]string{"render", "agent"}, 2, []string{"give either --cluster FILE or --token FILE"}},
		{[]string{"render", "bundle", "--bundle", "b.yaml", "-o", "text"}, 2, []string{`-o/--output must be yaml or json, not "text"`}},
		{[]string{"render", "agent", "--cluster", "nosuch.yaml"}, 1, []string{"open nosuch.yaml: no such file or directory"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, stderr)
			}
			if !strings.HasPrefix(stderr, "error: ") {
				t.Errorf("stderr %q: want the error", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if stdout != "" {
				t.Errorf("printed %q on stdout with an error", stdout)
			}
		})
	}
	if code, _, stderr := runMain(t, "render", "agent", "--cluster", "nosuch.yaml"); strings.Count(stderr, "nosuch.yaml") != 1 {
		t.Errorf("exit %d, stderr %q: want the file named once", code, stderr)
	}
	if code, stdout, _ := runMain(t, "render"); code != 0 || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("fleet render alone: exit %d, %q: want its help", code, stdout)
	}
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
