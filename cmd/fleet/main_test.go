package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/dev/testenv"
)

// asFleetEnv makes this test binary run main, as the fleet binary, with its
// arguments (TestMain_ExitStatusAndStderr).
const asFleetEnv = "FLEET_TEST_AS_FLEET"

// TestMain lets this test binary be a render worker, as the fleet binary is
// (`fleet render bundle` and the controller the examples test starts render
// Bundles in workers started from the running binary), and sets up the log
// as every suite does. Tests that need control planes start their own.
func TestMain(m *testing.M) {
	if os.Getenv(asFleetEnv) == "1" {
		main()
	}
	testenv.Main(m, testenv.Options{}, nil)
}

// TestMain_ExitStatusAndStderr runs the fleet binary's main in a process of
// its own: the exit status a shell sees, the error on stderr and nothing of
// it on stdout; a result (fleet diff's changes) exits 1 with no error line.
func TestMain_ExitStatusAndStderr(t *testing.T) {
	fleet := func(args ...string) (code int, stdout, stderr string) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), asFleetEnv+"=1")
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}
	if code, stdout, stderr := fleet("diff", "--bse", "x", "--head", "y"); code != 2 || stdout != "" ||
		stderr != "error: unknown flag: --bse, did you mean --base? (see 'fleet diff --help')\n" {
		t.Errorf("a misspelt flag: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := fleet("render", "agent", "--cluster", "nosuch.yaml"); code != 1 || stderr != "error: open nosuch.yaml: no such file or directory\n" {
		t.Errorf("a missing file: exit %d, stderr %q", code, stderr)
	}
	base, head := exampleCopy(t), exampleCopy(t, [2]string{"redeployAgentGeneration: 1", "redeployAgentGeneration: 2"})
	if code, stdout, stderr := fleet("diff", "--base", base, "--head", head, "--config", "config/fleet-controller.yaml"); code != 1 || stderr != "" || !strings.Contains(stdout, "redeployAgentGeneration 1 → 2") {
		t.Errorf("fleet diff with changes: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	if code, stdout, _ := fleet("diff", "--base", base, "--head", base, "--config", "config/fleet-controller.yaml"); code != 0 || !strings.Contains(stdout, "CLUSTERS CHANGED") {
		t.Errorf("fleet diff without changes: exit %d", code)
	}
}
