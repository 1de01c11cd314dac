package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Report says what Down removed.
type Report struct {
	Processes, Mounts, Clusters int
}

// Down removes everything the environment in dir runs or changed on the
// machine: processes (containers included), mounts, iptables rules, bridges,
// cgroups and the kubelet's files outside dir. It works from the state file
// alone, so it also cleans up after a crash. Logs stay in dir/<cluster>/logs.
func Down(dir string) (Report, error) {
	var r Report
	s, err := Load(dir)
	if err != nil || s == nil {
		return r, err
	}
	// The kubelet first, so nothing restarts what is being killed; then
	// the containers (they outlive their shims), then the rest.
	for _, c := range s.Clusters {
		pids := ownProcessesNamed(s.Dir, "kubelet")
		_ = killAll(pids, 10*time.Second)
		r.Processes += len(pids)
		if err := c.killCgroupProcs(); err != nil {
			return r, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	pids := ownProcesses(s.Dir)
	r.Processes += len(pids)
	if err := killAll(pids, 15*time.Second); err != nil {
		return r, err
	}
	var errs []error
	for _, mp := range mountsUnder(s.Dir) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			continue
		}
		r.Mounts++
	}
	if err := removeNAT(s.tag()); err != nil {
		errs = append(errs, err)
	}
	for _, c := range s.Clusters {
		if err := c.removePortmap(); err != nil {
			errs = append(errs, err)
		}
		if _, err := os.Stat("/sys/class/net/" + c.Bridge); err == nil {
			if err := run("ip", "link", "del", c.Bridge); err != nil {
				errs = append(errs, err)
			}
		}
		if err := c.removeCgroups(); err != nil {
			errs = append(errs, err)
		}
		removeKubeletLeftovers(c)
		// Keep the logs (pods' too); the rest (images, etcd data) is large and stale.
		entries, _ := os.ReadDir(c.Dir)
		for _, e := range entries {
			if e.Name() != "logs" && e.Name() != "pod-logs" {
				if err := os.RemoveAll(filepath.Join(c.Dir, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
		_ = os.Remove(filepath.Join(s.Dir, c.Name+".kubeconfig"))
		r.Clusters++
	}
	// containerd's shim socket directory is hard-coded and shared; it goes
	// only when empty.
	_ = os.Remove("/run/containerd/s")
	_ = os.Remove(statePath(s.Dir))
	return r, errors.Join(errs...)
}

func ownProcessesNamed(dir, name string) []int {
	var out []int
	for _, pid := range ownProcesses(dir) {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if filepath.Base(strings.SplitN(string(raw), "\x00", 2)[0]) == name {
			out = append(out, pid)
		}
	}
	return out
}

// removeKubeletLeftovers deletes the files the kubelet and CNI keep in
// fixed, shared places: container log links pointing into the cluster's
// directory and the CNI result cache entries of its pods.
func removeKubeletLeftovers(c *Cluster) {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, c.Dir+"/") {
			_ = os.Remove(l)
		}
	}
	// Cached results name the sandbox's netns, which lives in our state
	// directory (netns_mounts_under_state_dir); the loopback network's
	// entries have no other mark of their cluster.
	results, _ := filepath.Glob("/var/lib/cni/results/*")
	for _, f := range results {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(c.Dir+"/")) {
			_ = os.Remove(f)
		}
	}
}

// Leftovers lists what of the environment s is still on the machine;
// empty after a successful Down.
func Leftovers(s *State) []string {
	var out []string
	for _, pid := range ownProcesses(s.Dir) {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d %s", pid, strings.ReplaceAll(string(raw), "\x00", " ")))
	}
	for _, mp := range mountsUnder(s.Dir) {
		out = append(out, "mount "+mp)
	}
	if rules, err := natRulesTagged(s.tag()); err == nil {
		for _, r := range rules {
			out = append(out, "iptables "+r)
		}
	}
	for _, c := range s.Clusters {
		if rules, err := natRulesTagged(c.portmapTag()); err == nil {
			for _, r := range rules {
				out = append(out, "iptables "+r)
			}
		}
		if _, err := os.Stat("/sys/class/net/" + c.Bridge); err == nil {
			out = append(out, "bridge "+c.Bridge)
		}
		for _, d := range c.cgroupDirs() {
			if _, err := os.Stat(d); err == nil {
				out = append(out, "cgroup "+d)
			}
		}
	}
	return out
}
