package devcluster

import (
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Clusters of all slots can run side by side only if nothing they bind or
// route overlaps.
func TestPlan_NothingOverlapsAcrossClustersAndSlots(t *testing.T) {
	seenPorts := map[int]string{}
	seenNames := map[string]string{}
	var subnets []*net.IPNet
	for slot := 0; slot <= 9; slot++ {
		s, err := Plan(t.TempDir(), slot, "a", "b", "c", "d", "e", "f")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.Clusters {
			id := c.Name + "@" + string(rune('0'+slot))
			for _, p := range []int{c.APIPort, c.EtcdPort, c.EtcdPeerPort, c.KubeletPort, c.HealthzPort, c.KCMPort, c.SchedulerPort} {
				if other, dup := seenPorts[p]; dup {
					t.Errorf("port %d of %s already used by %s", p, id, other)
				}
				if p < 1024 || p > 65535 {
					t.Errorf("port %d of %s out of range", p, id)
				}
				seenPorts[p] = id
			}
			for _, n := range []string{c.Bridge, c.CgroupRoot, c.ServiceIP} {
				if other, dup := seenNames[n]; dup {
					t.Errorf("%s of %s already used by %s", n, id, other)
				}
				seenNames[n] = id
			}
			if len(c.Bridge) > 15 {
				t.Errorf("bridge name %q longer than an interface name may be", c.Bridge)
			}
			for _, cidr := range []string{c.ServiceCIDR, c.PodSubnet} {
				_, n, err := net.ParseCIDR(cidr)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range subnets {
					if o.Contains(n.IP) || n.Contains(o.IP) {
						t.Errorf("%s of %s overlaps %s", cidr, id, o)
					}
				}
				subnets = append(subnets, n)
			}
			_, svc, _ := net.ParseCIDR(c.ServiceCIDR)
			if !svc.Contains(net.ParseIP(c.ServiceIP)) {
				t.Errorf("service IP %s not in %s", c.ServiceIP, c.ServiceCIDR)
			}
			if !strings.HasPrefix(c.Bridge, "fdev") {
				t.Errorf("bridge %s is not matched by the PREROUTING rule's fdev+", c.Bridge)
			}
		}
	}
}

func TestPlan_RejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		slot  int
		names []string
	}{
		{-1, []string{"a"}}, {10, []string{"a"}}, {0, nil}, {0, []string{"a", "b", "c", "d", "e", "f", "g"}},
	} {
		if _, err := Plan(t.TempDir(), tc.slot, tc.names...); err == nil {
			t.Errorf("Plan(slot %d, %d clusters) accepted", tc.slot, len(tc.names))
		}
	}
}

// down deletes rules by turning `iptables -S` lines back into arguments;
// the comment is quoted there when it has spaces.
func TestSplitRule(t *testing.T) {
	for line, want := range map[string][]string{
		`OUTPUT -d 10.100.0.1/32 -p tcp -m tcp --dport 443 -m comment --comment fleet-dev-1a2b -j DNAT --to-destination 127.0.0.1:16400`: {
			"OUTPUT", "-d", "10.100.0.1/32", "-p", "tcp", "-m", "tcp", "--dport", "443", "-m", "comment", "--comment", "fleet-dev-1a2b",
			"-j", "DNAT", "--to-destination", "127.0.0.1:16400"},
		`PREROUTING -i fdev+ -m comment --comment "two words" -j ACCEPT`: {
			"PREROUTING", "-i", "fdev+", "-m", "comment", "--comment", "two words", "-j", "ACCEPT"},
		// The CNI portmap plugin's hostPort rules quote the network's name.
		`CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"fdev8\" id: \"e5a8\"" -m multiport --dports 18608 -j CNI-DN-d9a0`: {
			"CNI-HOSTPORT-DNAT", "-p", "tcp", "-m", "comment", "--comment", `dnat name: "fdev8" id: "e5a8"`, "-m", "multiport", "--dports", "18608", "-j", "CNI-DN-d9a0"},
	} {
		if diff := cmp.Diff(want, splitRule(line)); diff != "" {
			t.Errorf("splitRule(%q) (-want +got):\n%s", line, diff)
		}
	}
}

func TestStateTag_DependsOnTheDirectory(t *testing.T) {
	a, _ := Plan("/tmp/a", 0, "x")
	b, _ := Plan("/tmp/b", 0, "x")
	if a.tag() == b.tag() || !strings.HasPrefix(a.tag(), "fleet-dev-") {
		t.Errorf("tags %q and %q: each state directory needs its own", a.tag(), b.tag())
	}
}
