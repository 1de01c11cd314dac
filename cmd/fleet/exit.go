package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gitops-fleet/fleet/internal/suggest"
)

// Exit status of every command (docs/operations.md "Exit status"):
// exitFailed is a command that failed, or for `fleet diff` and `fleet
// rollout status --wait` the result a script acts on (changes found; a
// rollout that halted or did not finish in time); exitUsage is a command
// line that cannot run (an unknown or missing flag, a bad flag value), and
// for those two commands any error, so that 1 keeps its one meaning.
const (
	exitFailed = 1
	exitUsage  = 2
)

// exitError ends the process with Code; Err, when set, is printed on
// stderr (a result such as "changes found" has none).
type exitError struct {
	Code int
	Err  error
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

// usageError is a command line that cannot run: exit 2.
func usageError(format string, args ...any) error {
	return &exitError{Code: exitUsage, Err: fmt.Errorf(format, args...)}
}

// execute runs the command line and prints its error; it returns the exit
// status.
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	err := run(ctx, root, args)
	var exit *exitError
	if !errors.As(err, &exit) {
		return 0
	}
	if exit.Err != nil {
		fmt.Fprintln(stderr, "error:", exit.Err)
	}
	return exit.Code
}

// run runs the command line; every error it returns is an *exitError: a
// command's own errors keep their code (1 unless the command chose one),
// and what cobra refuses before a command runs (unknown commands, flags
// and arguments, missing required flags, flag values that do not parse) is
// a usage error, with a "did you mean" for a misspelt flag and where to
// read the usage.
func run(ctx context.Context, root *cobra.Command, args []string) error {
	root.SetFlagErrorFunc(flagError)
	ownErrors(root)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var exit *exitError
	if errors.As(err, &exit) {
		return exit
	}
	if cmd == nil {
		cmd = root
	}
	return &exitError{Code: exitUsage, Err: withHelpHint(err.Error(), cmd)}
}

// withHelpHint ends a usage error with where to read the usage.
func withHelpHint(msg string, c *cobra.Command) error {
	msg = strings.TrimRight(msg, "\n")
	if strings.Contains(msg, "\n") {
		return fmt.Errorf("%s\nsee '%s --help'", msg, c.CommandPath())
	}
	return fmt.Errorf("%s (see '%s --help')", msg, c.CommandPath())
}

// ownErrors marks the errors of every command's RunE as its own (exit 1
// unless it chose a code), telling them apart from cobra's usage errors.
func ownErrors(c *cobra.Command) {
	if runE := c.RunE; runE != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			err := runE(cmd, args)
			var exit *exitError
			if err == nil || errors.As(err, &exit) {
				return err
			}
			return &exitError{Code: exitFailed, Err: err}
		}
	}
	if c.RunE == nil && c.Run == nil && c.HasSubCommands() && c.HasParent() {
		// A group (fleet render, fleet rollout) would print its help and
		// exit 0 for a misspelt subcommand, as cobra does only for the root.
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			if s := suggest.Nearest(args[0], names); s != "" {
				msg += fmt.Sprintf(", did you mean %q?", s)
			}
			return &exitError{Code: exitUsage, Err: withHelpHint(msg, cmd)}
		}
	}
	for _, sub := range c.Commands() {
		ownErrors(sub)
	}
}

// flagError is a usage error; an unknown flag close to one of the
// command's says which one was meant.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		var names []string
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		name, _, _ = strings.Cut(name, "=")
		if s := suggest.Nearest(name, names); s != "" {
			msg += fmt.Sprintf(", did you mean --%s?", s)
		}
	}
	return &exitError{Code: exitUsage, Err: withHelpHint(msg, c)}
}
