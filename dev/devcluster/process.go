package devcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// components are the programs an environment runs; down kills only
// processes running one of these from its state directory.
var components = map[string]bool{
	"etcd": true, "kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true,
	"kubelet": true, "containerd": true, "containerd-shim-runc-v2": true,
}

// process is a component started detached from the caller's session, so a
// cluster outlives `fleet-dev up`; down finds it again by its command line.
type process struct {
	name   string
	log    string
	exited chan struct{}
	err    error
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	p := &process{name: name, log: c.LogPath(name), exited: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// failed says why p is gone, naming its log, as an *exitedError; nil while
// it runs.
func (p *process) failed() error {
	select {
	case <-p.exited:
		return &exitedError{name: p.name, err: p.err, log: p.log}
	default:
		return nil
	}
}

// exitedError: a component of the cluster exited; waiting on it is over.
type exitedError struct {
	name, log string
	err       error
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("%s exited (%v): read %s", e.name, e.err, e.log)
}

func (e *exitedError) Unwrap() error { return e.err }

// ownProcesses lists the PIDs of components running from dir, never this
// process or its ancestors (a shell that mentions dir is not ours to kill).
func ownProcesses(dir string) []int {
	skip := map[int]bool{}
	for pid := os.Getpid(); pid > 1; pid = parentOf(pid) {
		skip[pid] = true
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if !components[filepath.Base(args[0])] {
			continue
		}
		if strings.Contains(string(raw), dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// killAll sends SIGKILL to pids and waits until they are gone: the state is
// thrown away anyway, so a graceful stop buys nothing but time.
func killAll(pids []int, timeout time.Duration) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d survived SIGKILL", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie is dead; its parent (maybe us) reaps it later.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) < i+3 || s[i+2] != 'Z'
}

// PauseAPIServer stops the cluster's kube-apiserver (SIGSTOP: it keeps its
// state, answers nothing, and connections to it hang) until resume is
// called (SIGCONT). The e2e suite uses it to show what works while an
// upstream is unreachable.
func (c *Cluster) PauseAPIServer() (resume func() error, err error) {
	pids := ownProcessesNamed(c.Dir, "kube-apiserver")
	if len(pids) != 1 {
		return nil, fmt.Errorf("cluster %s: %d kube-apiserver processes, want 1", c.Name, len(pids))
	}
	pid := pids[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping kube-apiserver of %s: %w", c.Name, err)
	}
	return func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
}
