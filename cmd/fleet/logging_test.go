package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestLogLevel_FiltersWhatEachLevelPromises: at error only failures are
// written, as zap's "error" level (what a filter or alert on level=error
// sees); info adds what the component does; debug adds the V(1) details the
// docs call verbosity 1; a number is a logr verbosity. A bad value is an
// error naming the flag.
func TestLogLevel_FiltersWhatEachLevelPromises(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  []string // messages written, in order
	}{
		{"error", []string{"failed"}},
		{"info", []string{"doing", "failed"}},
		{"", []string{"doing", "failed"}},
		{"debug", []string{"doing", "detail", "failed"}},
		{"1", []string{"doing", "detail", "failed"}},
		{"2", []string{"doing", "detail", "finer", "failed"}},
	} {
		t.Run("level="+tc.level, func(t *testing.T) {
			var buf bytes.Buffer
			o := &logOptions{level: tc.level, out: &buf}
			log, err := o.setup()
			if err != nil {
				t.Fatal(err)
			}
			log.Info("doing")
			log.V(1).Info("detail")
			log.V(2).Info("finer")
			log.Error(errors.New("boom"), "failed")
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var entry struct {
					Level string `json:"level"`
					Msg   string `json:"msg"`
				}
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatalf("not a JSON line: %q", line)
				}
				got = append(got, entry.Msg)
				if entry.Msg == "failed" && entry.Level != "error" {
					t.Errorf("an Error line has level %q, want error", entry.Level)
				}
				if entry.Msg != "failed" && entry.Level == "error" {
					t.Errorf("an Info line has level error")
				}
				if strings.Contains(line, "stacktrace") {
					t.Errorf("a stack trace on an expected failure: %s", line)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("--log-level=%s wrote %v, want %v", tc.level, got, tc.want)
			}
		})
	}
	if _, err := (&logOptions{level: "verbose"}).setup(); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("--log-level=verbose: %v, want an error naming the flag", err)
	}
}

// TestLogLevel_EveryComponentHasTheFlagAndReadsLOG_LEVEL: the flag exists on
// each long-running command and defaults to $LOG_LEVEL (the agent chart and
// a Cluster's agentEnvVars set it).
func TestLogLevel_EveryComponentHasTheFlagAndReadsLOG_LEVEL(t *testing.T) {
	t.Setenv(logLevelEnv, "debug")
	for _, c := range []struct {
		name string
		new  func() *cobra.Command
	}{
		{"agent", newAgentCommand}, {"controller", newControllerCommand}, {"proxy", newProxyCommand}, {"renderer", newRendererCommand},
	} {
		f := c.new().Flags().Lookup("log-level")
		if f == nil {
			t.Errorf("fleet %s has no --log-level", c.name)
			continue
		}
		if f.DefValue != "debug" {
			t.Errorf("fleet %s --log-level defaults to %q with LOG_LEVEL=debug", c.name, f.DefValue)
		}
	}
}
