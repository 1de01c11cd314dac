package devcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupFS = "/sys/fs/cgroup"

// Preflight says what this machine lacks to run dev clusters, with the fix.
func Preflight() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (kubelet, containerd and iptables need it): run as root")
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+": apt-get install -y containerd runc containernetworking-plugins iptables iproute2 (or `make dev-deps`)")
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, "CNI plugin "+plugin+": apt-get install -y containernetworking-plugins")
		}
	}
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		missing = append(missing, "a cgroup v1 (or hybrid) host: this machine is cgroup v2-only, which the dev clusters do not support yet")
	}
	if len(missing) > 0 {
		return fmt.Errorf("this machine cannot run dev clusters:\n  %s", strings.Join(missing, "\n  "))
	}
	return nil
}

const cniBinDir = "/usr/lib/cni"

// cgroupControllers are the v1 hierarchies the kubelet's cgroup root must
// exist in (the kubelet refuses a missing root).
func cgroupControllers() []string {
	entries, _ := os.ReadDir(cgroupFS)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, e.Name())
		}
	}
	return out
}

func (c *Cluster) makeCgroups() error {
	for _, ctrl := range cgroupControllers() {
		dir := filepath.Join(cgroupFS, ctrl, c.CgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if ctrl == "cpuset" {
			// A new cpuset has no CPUs or memory nodes until given its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(cgroupFS, ctrl, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// cgroupDirs are every place the cluster's cgroups live, the kubelet's
// cgroup2 mirror included.
func (c *Cluster) cgroupDirs() []string {
	dirs := []string{filepath.Join(cgroupFS, "unified", c.CgroupRoot)}
	for _, ctrl := range cgroupControllers() {
		dirs = append(dirs, filepath.Join(cgroupFS, ctrl, c.CgroupRoot))
	}
	return dirs
}

// killCgroupProcs kills every process in the cluster's cgroups: the
// containers, which outlive their killed shims otherwise.
func (c *Cluster) killCgroupProcs() error {
	var pids []int
	for _, root := range c.cgroupDirs() {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return killAll(pids, 10*time.Second)
}

// removeCgroups removes the cluster's cgroups deepest first (rmdir of a
// cgroup with children fails with EBUSY).
func (c *Cluster) removeCgroups() error {
	var errs []error
	for _, root := range c.cgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for try := 0; try < 50; try++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond) // a process may still be leaving it
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeBridge creates the CNI bridge before the first pod so that
// route_localnet can be set on it: DNAT to 127.0.0.1 of traffic arriving
// from pods needs it.
func (c *Cluster) makeBridge() error {
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); err != nil {
		if err := run("ip", "link", "add", c.Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "set", c.Bridge, "up"); err != nil {
		return err
	}
	return os.WriteFile("/proc/sys/net/ipv4/conf/"+c.Bridge+"/route_localnet", []byte("1"), 0o644)
}

// natRules send the cluster's `kubernetes` Service address to its API
// server: from the host (OUTPUT) and from pods of any dev cluster
// (PREROUTING on the fdev bridges). No kube-proxy runs here.
func (c *Cluster) natRules(tag string) [][]string {
	to := fmt.Sprintf("127.0.0.1:%d", c.APIPort)
	match := []string{"-d", c.ServiceIP + "/32", "-p", "tcp", "--dport", "443", "-m", "comment", "--comment", tag, "-j", "DNAT", "--to-destination", to}
	return [][]string{
		append([]string{"OUTPUT"}, match...),
		append([]string{"PREROUTING", "-i", "fdev+"}, match...),
	}
}

func (c *Cluster) addNAT(tag string) error {
	for _, rule := range c.natRules(tag) {
		if exec.Command("iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...).Run() == nil {
			continue
		}
		if err := run("iptables", append([]string{"-w", "-t", "nat", "-A"}, rule...)...); err != nil {
			return err
		}
	}
	return nil
}

// removeNAT deletes every nat rule carrying tag, whatever cluster made it.
func removeNAT(tag string) error {
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	if err != nil {
		return fmt.Errorf("iptables -t nat -S: %w", err)
	}
	var errs []error
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "-A ") || !strings.Contains(line, tag) {
			continue
		}
		args := append([]string{"-w", "-t", "nat", "-D"}, splitRule(strings.TrimPrefix(line, "-A "))...)
		if err := run("iptables", args...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// splitRule splits an `iptables -S` line, honouring double quotes and the
// backslash-escaped quotes inside them (the CNI portmap plugin's comments).
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, started, escaped := false, false, false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted, started = !quoted, true
		case r == ' ' && !quoted:
			if started {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if started {
		out = append(out, cur.String())
	}
	return out
}

// mountsUnder lists mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func natRulesTagged(tag string) ([]string, error) {
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	if err != nil {
		return nil, err
	}
	var rules []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, tag) {
			rules = append(rules, line)
		}
	}
	return rules, nil
}

// portmapTag is how the CNI portmap plugin names a cluster's network in
// the comments of its hostPort rules (iptables -S quotes it).
func (c *Cluster) portmapTag() string { return `\"` + c.Bridge + `\"` }

// removePortmap deletes the hostPort rules the CNI portmap plugin left for
// the cluster's pods (they are killed without a CNI DEL): the jumps from
// CNI-HOSTPORT-DNAT that name its network, and the chains they jump to.
func (c *Cluster) removePortmap() error {
	rules, err := natRulesTagged(c.portmapTag())
	if err != nil {
		return nil // no nat table, no rules
	}
	var errs []error
	for _, line := range rules {
		args := splitRule(strings.TrimPrefix(line, "-A "))
		if err := run("iptables", append([]string{"-w", "-t", "nat", "-D"}, args...)...); err != nil {
			errs = append(errs, err)
			continue
		}
		for i, a := range args {
			if a == "-j" && i+1 < len(args) && strings.HasPrefix(args[i+1], "CNI-DN-") {
				_ = run("iptables", "-w", "-t", "nat", "-F", args[i+1])
				_ = run("iptables", "-w", "-t", "nat", "-X", args[i+1])
			}
		}
	}
	return errors.Join(errs...)
}
