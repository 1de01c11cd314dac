package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// registryConfigDir is containerd's registry configuration (config_path):
// one hosts.toml per registry host, read again at each pull.
func (c *Cluster) registryConfigDir() string { return filepath.Join(c.Dir, "containerd", "certs.d") }

// TrustHTTPRegistry lets the cluster's containerd pull from a registry
// served over plain http at host (host:port), as a local registry for the
// image path is: containerd asks https otherwise.
func (c *Cluster) TrustHTTPRegistry(host string) error {
	dir := filepath.Join(c.registryConfigDir(), host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}
