package devcluster

import (
	"fmt"
	"os/exec"
	"strconv"
)

// HostAddress is the address at which the pods of every cluster of the
// environment, and the host itself, reach a service of the host listening
// on 127.0.0.1 (the dev git server, a chart repository): ExposeHost sends
// a port of it to the same port on 127.0.0.1, as the `kubernetes` Service
// addresses are sent to the API servers. Nothing listens on it otherwise.
func (s *State) HostAddress() string { return fmt.Sprintf("10.99.%d.1", s.Slot) }

func (s *State) hostRules(port int) [][]string {
	to := "127.0.0.1:" + strconv.Itoa(port)
	match := []string{"-d", s.HostAddress() + "/32", "-p", "tcp", "--dport", strconv.Itoa(port), "-m", "comment", "--comment", s.tag(), "-j", "DNAT", "--to-destination", to}
	return [][]string{
		append([]string{"OUTPUT"}, match...),
		append([]string{"PREROUTING", "-i", "fdev+"}, match...),
	}
}

// ExposeHost makes 127.0.0.1:port reachable as HostAddress():port from the
// host and from the dev clusters' pods (their bridges route 127.0.0.1 for
// the API servers already). `down` removes the rules with the
// environment's others; Unexpose removes them before.
func (s *State) ExposeHost(port int) error {
	for _, rule := range s.hostRules(port) {
		if exec.Command("iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...).Run() == nil {
			continue
		}
		if err := run("iptables", append([]string{"-w", "-t", "nat", "-A"}, rule...)...); err != nil {
			return err
		}
	}
	return nil
}

// Unexpose removes what ExposeHost(port) added.
func (s *State) Unexpose(port int) error {
	var first error
	for _, rule := range s.hostRules(port) {
		if exec.Command("iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...).Run() != nil {
			continue
		}
		if err := run("iptables", append([]string{"-w", "-t", "nat", "-D"}, rule...)...); err != nil && first == nil {
			first = err
		}
	}
	return first
}
