package testenv

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// LogEnv chooses what the code under test logs to stderr: nothing but
// errors by default, "info" adds V(0) lines, "debug" (or any other value)
// adds V(1) lines.
const LogEnv = "FLEET_TEST_LOG"

// captureVerbosity is the most verbose level Logs keeps.
const captureVerbosity = 1

// Logs is what the code under test logged through controller-runtime's
// logger (ctrl.Log, log.FromContext and every logger derived from them),
// one line each, when the suite captures logs.
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Logs) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line)
	l.b.WriteByte('\n')
}

// String returns every line logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// setupLogging makes controller-runtime's logger write to stderr as LogEnv
// says and, when capture is set, keep every line in the returned Logs.
func setupLogging(capture bool) *Logs {
	echo := -1 // errors only
	switch v := os.Getenv(LogEnv); v {
	case "":
	case "info":
		echo = 0
	default:
		echo = captureVerbosity
	}
	out := &logOutput{logs: &Logs{}, capture: capture, echo: echo}
	ctrllog.SetLogger(logr.New(&logSink{Formatter: funcr.NewFormatter(funcr.Options{Verbosity: captureVerbosity}), out: out}))
	return out.logs
}

type logOutput struct {
	logs    *Logs
	capture bool
	echo    int
}

func (o *logOutput) write(prefix, args string, echo bool) {
	line := prefix + " " + args
	if o.capture {
		o.logs.write(line)
	}
	if echo {
		fmt.Fprintln(os.Stderr, line)
	}
}

// logSink formats as funcr does and writes to a logOutput.
type logSink struct {
	funcr.Formatter
	out *logOutput
}

func (s *logSink) Init(info logr.RuntimeInfo) { s.Formatter.Init(info) }

func (s *logSink) Enabled(level int) bool {
	return level <= s.out.echo || (s.out.capture && level <= captureVerbosity)
}

func (s *logSink) Info(level int, msg string, kv ...any) {
	prefix, args := s.FormatInfo(level, msg, kv)
	s.out.write(prefix, args, level <= s.out.echo)
}

func (s *logSink) Error(err error, msg string, kv ...any) {
	prefix, args := s.FormatError(err, msg, kv)
	s.out.write(prefix, args, true)
}

func (s *logSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.AddValues(kv)
	return &c
}

func (s *logSink) WithName(name string) logr.LogSink {
	c := *s
	c.AddName(name)
	return &c
}
