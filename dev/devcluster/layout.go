// Package devcluster runs real single-node Kubernetes clusters on this
// machine: etcd, kube-apiserver, kube-controller-manager (all controllers),
// kube-scheduler, a kubelet and its own containerd per cluster, every
// listener on 127.0.0.1. It backs `fleet-dev up/down/demo` and the e2e suite.
//
// Several clusters (and several environments, by slot) coexist: each has its
// own ports, directories, CNI bridge and subnet, service range, cgroup root
// and CA. Pods reach any cluster's API server through that cluster's
// `kubernetes` Service address (10.<100+g>.0.1:443), which iptables DNAT
// sends to the API server on loopback; so the same kubeconfig works from the
// host and from pods in every cluster.
package devcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ClustersPerSlot bounds the clusters of one environment; slots keep
// environments (the demo and the e2e suite, say) out of each other's way.
const ClustersPerSlot = 6

// Cluster is one planned cluster: everything that must differ between
// clusters on one machine is derived from its global index.
type Cluster struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	Dir   string `json:"dir"`
	// APIPort is the API server's port on 127.0.0.1.
	APIPort int `json:"apiPort"`
	// ServiceIP is the `kubernetes` Service address; iptables sends it to
	// the API server from the host and from every dev cluster's pods.
	ServiceIP     string `json:"serviceIP"`
	ServiceCIDR   string `json:"serviceCIDR"`
	PodSubnet     string `json:"podSubnet"`
	Bridge        string `json:"bridge"`
	CgroupRoot    string `json:"cgroupRoot"`
	EtcdPort      int    `json:"etcdPort"`
	EtcdPeerPort  int    `json:"etcdPeerPort"`
	KubeletPort   int    `json:"kubeletPort"`
	HealthzPort   int    `json:"healthzPort"`
	KCMPort       int    `json:"kcmPort"`
	SchedulerPort int    `json:"schedulerPort"`
}

// State is what an environment's state directory records, so that `down`
// can remove everything even after a crash.
type State struct {
	Dir      string     `json:"dir"`
	Slot     int        `json:"slot"`
	Clusters []*Cluster `json:"clusters"`
}

// Plan lays out the named clusters of slot in dir (made absolute).
func Plan(dir string, slot int, names ...string) (*State, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if slot < 0 || slot > 9 {
		return nil, fmt.Errorf("slot %d: must be 0-9", slot)
	}
	if len(names) == 0 || len(names) > ClustersPerSlot {
		return nil, fmt.Errorf("%d clusters: an environment has 1 to %d", len(names), ClustersPerSlot)
	}
	s := &State{Dir: abs, Slot: slot}
	for i, name := range names {
		g := slot*ClustersPerSlot + i
		base := 16400 + 20*g
		s.Clusters = append(s.Clusters, &Cluster{
			Name: name, Index: g, Dir: filepath.Join(abs, name),
			APIPort: base, EtcdPort: base + 1, EtcdPeerPort: base + 2,
			KubeletPort: base + 3, HealthzPort: base + 4, KCMPort: base + 5, SchedulerPort: base + 6,
			ServiceIP:   fmt.Sprintf("10.%d.0.1", 100+g),
			ServiceCIDR: fmt.Sprintf("10.%d.0.0/24", 100+g),
			PodSubnet:   fmt.Sprintf("10.%d.0.0/24", 180+g),
			Bridge:      fmt.Sprintf("fdev%d", g),
			CgroupRoot:  fmt.Sprintf("/fleet-dev-%d", g),
		})
	}
	return s, nil
}

// Cluster returns the named cluster.
func (s *State) Cluster(name string) *Cluster {
	for _, c := range s.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// tag marks the iptables rules of this state directory.
func (s *State) tag() string {
	sum := sha256.Sum256([]byte(s.Dir))
	return "fleet-dev-" + hex.EncodeToString(sum[:4])
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

func (s *State) save() error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath(s.Dir), b, 0o644)
}

// Load reads the state of the environment in dir; nil when there is none.
func Load(dir string) (*State, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(statePath(abs))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &State{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w (remove the directory by hand after checking nothing runs from it)", statePath(abs), err)
	}
	return s, nil
}

// KubeconfigPath is the admin kubeconfig users and tests use from the host.
func (c *Cluster) KubeconfigPath() string { return filepath.Join(c.Dir, "admin.kubeconfig") }

// LogPath is where the named component logs.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

// Server is the API server's address as every dev cluster's pods and the
// host see it.
func (c *Cluster) Server() string { return "https://" + net.JoinHostPort(c.ServiceIP, "443") }

// CA is the cluster CA in PEM.
func (c *Cluster) CA() ([]byte, error) { return os.ReadFile(filepath.Join(c.Dir, "pki", "ca.crt")) }

func (c *Cluster) sock() string { return filepath.Join(c.Dir, "containerd", "containerd.sock") }
