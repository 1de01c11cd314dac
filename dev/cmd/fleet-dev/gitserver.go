package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/gitserver"
)

func newDevGitServerCommand() *cobra.Command {
	var (
		f      devFlags
		dir    string
		branch string
		repos  []string
	)
	cmd := &cobra.Command{
		Use:   "git-server",
		Short: "Serve git repositories (HTTPS with basic auth, SSH with a key) to the dev clusters' pods until interrupted",
		Long: `Serve the bare repositories of --dir over HTTPS (basic auth, a CA of its
own) and SSH (one client key, a host key given as known_hosts), on
127.0.0.1, and at the host address of the dev environment of --state-dir
(reachable from every dev cluster's pod and from the host). --repo
NAME=DIR commits DIR's files into repository NAME.git (made if missing)
before serving. The credentials are written to --dir: password, id_ed25519,
known_hosts, ca.crt, and a client Secret for each form (secret-https.yaml,
secret-ssh.yaml) to apply in a GitRepo's namespace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := devcluster.Load(f.stateDir)
			if err != nil {
				return err
			}
			if s == nil {
				return fmt.Errorf("no dev environment in %s: run fleet-dev up first (or give --state-dir)", f.stateDir)
			}
			if dir == "" {
				dir = filepath.Join(s.Dir, "git")
			}
			host := s.HostAddress()
			srv, err := gitserver.Start(gitserver.Options{Dir: dir, Hosts: []string{host}})
			if err != nil {
				return err
			}
			defer srv.Stop()
			for _, port := range []int{srv.HTTPPort(), srv.SSHPort()} {
				if err := s.ExposeHost(port); err != nil {
					return err
				}
				defer func() { _ = s.Unexpose(port) }()
			}
			out := cmd.OutOrStdout()
			for _, r := range repos {
				name, src, ok := strings.Cut(r, "=")
				if !ok {
					return fmt.Errorf("--repo %q: want NAME=DIR", r)
				}
				name = strings.TrimSuffix(name, ".git") + ".git"
				if _, err := os.Stat(filepath.Join(srv.Root(), name)); err != nil {
					if err := srv.CreateRepo(name, branch); err != nil {
						return err
					}
				}
				commit, err := srv.CommitDir(name, src, "fleet-dev git-server: "+src)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: %s committed as %s\n", name, src, commit)
			}
			files, err := writeGitCredentials(dir, srv, host)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "git server for %s (from pods and the host):\n", s.Dir)
			fmt.Fprintf(out, "  HTTPS %s (user %s, password in %s, CA %s)\n", srv.HTTPURL(host, "NAME.git"), srv.Username, files["password"], files["ca.crt"])
			fmt.Fprintf(out, "  SSH   %s (key %s, known_hosts %s)\n", srv.SSHURL(host, "NAME.git"), files["id_ed25519"], files["known_hosts"])
			fmt.Fprintf(out, "  client Secrets: %s, %s (kubectl -n NAMESPACE apply -f ...)\n", files["secret-https.yaml"], files["secret-ssh.yaml"])
			fmt.Fprintf(out, "  repositories in %s; Ctrl-C stops\n", srv.Root())
			<-cmd.Context().Done()
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the repositories and credentials (default: git/ in the state directory)")
	cmd.Flags().StringVar(&branch, "branch", "main", "the branch of repositories --repo makes")
	cmd.Flags().StringArrayVar(&repos, "repo", nil, "NAME=DIR: commit DIR's files into repository NAME.git before serving (repeatable)")
	return cmd
}

// writeGitCredentials writes what clients of srv need into dir (0600).
func writeGitCredentials(dir string, srv *gitserver.Server, host string) (map[string]string, error) {
	basicAuth := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-https\ntype: kubernetes.io/basic-auth\nstringData:\n  username: %s\n  password: %s\n", srv.Username, srv.Password)
	sshAuth := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-ssh\ntype: kubernetes.io/ssh-auth\nstringData:\n  ssh-privatekey: |\n" +
		indent(string(srv.ClientKey), "    ") + "  known_hosts: |\n" + indent(string(srv.KnownHosts(host)), "    ")
	contents := map[string][]byte{
		"password": []byte(srv.Password + "\n"), "id_ed25519": srv.ClientKey, "known_hosts": srv.KnownHosts(host),
		"ca.crt": srv.CA, "secret-https.yaml": []byte(basicAuth), "secret-ssh.yaml": []byte(sshAuth),
	}
	files := map[string]string{}
	for name, b := range contents {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
		files[name] = p
	}
	return files, nil
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimRight(s, "\n")+"\n", "\n") {
		if line != "" {
			b.WriteString(prefix + line)
		}
	}
	return b.String()
}
