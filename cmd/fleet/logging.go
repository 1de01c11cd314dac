package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logLevelEnv is the environment variable --log-level defaults to: the
// fleet-agent chart sets it (value logLevel), and so may a Cluster's
// spec.agentEnvVars for an agent the controller manages.
const logLevelEnv = "LOG_LEVEL"

// logOptions are the logging flags every long-running component has.
type logOptions struct {
	level string
	dev   bool
	// out is where logs go (nil: stderr); tests set it.
	out io.Writer
}

func (o *logOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.level, "log-level", os.Getenv(logLevelEnv),
		"error (failures only), info (the default: also what the component does), debug (also the details the docs call verbosity 1), or a number N for logr verbosity N (1 is debug); default $"+logLevelEnv+", else info")
	f.BoolVar(&o.dev, "dev-log", false, "human-readable logs instead of JSON")
}

// parseLogLevel turns a --log-level value into a zap level: logr's V(n) is
// zap level -n, and Error lines are zap's error level, so a filter on
// level=error sees every failure and nothing else.
func parseLogLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return zapcore.InfoLevel, nil
	case "debug":
		return zapcore.DebugLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 127 {
		return 0, fmt.Errorf("--log-level %q: want error, info, debug or a verbosity from 0 to 127", s)
	}
	return zapcore.Level(-n), nil
}

// setup makes the process's logger (controller-runtime's, which every
// package logs through) and returns it. remotedialer logs through logrus:
// it follows the same level.
func (o *logOptions) setup() (logr.Logger, error) {
	lvl, err := parseLogLevel(o.level)
	if err != nil {
		return logr.Discard(), err
	}
	if o.level == "" && o.dev {
		lvl = zapcore.DebugLevel // what --dev-log alone always meant
	}
	// No stack traces on error lines: they are expected failures with a
	// message that says what to do, not bugs.
	opts := []zap.Opts{zap.UseDevMode(o.dev), zap.Level(lvl), zap.StacktraceLevel(zapcore.DPanicLevel)}
	if o.out != nil {
		opts = append(opts, zap.WriteTo(o.out))
	}
	log := zap.New(opts...)
	ctrl.SetLogger(log)
	switch {
	case lvl >= zapcore.ErrorLevel:
		logrus.SetLevel(logrus.ErrorLevel)
	case lvl < zapcore.InfoLevel:
		logrus.SetLevel(logrus.DebugLevel)
	default:
		logrus.SetLevel(logrus.InfoLevel)
	}
	return log, nil
}
