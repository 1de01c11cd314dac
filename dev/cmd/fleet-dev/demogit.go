package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gitops-fleet/fleet/dev/devcluster"
	"github.com/gitops-fleet/fleet/dev/devenv"
	"github.com/gitops-fleet/fleet/dev/gitserver"
)

// demoRepo is the name of the demo's repository and of its GitRepo.
const demoRepo = "fleet-clusters"

// demoFromGit is the design card's first use with the product alone: a git
// server on this machine serves examples/gitops with dev-1's kubeconfig
// encrypted with SOPS; a GitRepo in fleet-local reads it; the local
// cluster's agent applies the Cluster and the decrypted kubeconfig Secret
// upstream; the controller pushes dev-1's agent. The git server lives as
// long as the returned stop is not called.
func demoFromGit(ctx context.Context, st *stepper, s *devcluster.State, repoDir string, upc client.Client) (*devenv.GitopsRepo, func(), error) {
	t := time.Now()
	log.SetOutput(io.Discard) // the git server's library logs every request
	// A new demo has new clusters and a new key: the repository of an
	// earlier run (fleet-dev down keeps the state directory) goes too.
	dir := filepath.Join(s.Dir, "git")
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	host := s.HostAddress()
	srv, err := gitserver.Start(gitserver.Options{Dir: dir, Hosts: []string{host}})
	if err != nil {
		return nil, nil, fmt.Errorf("step 'start the git server' failed: %w", err)
	}
	var unexpose []int
	stop := func() {
		for _, p := range unexpose {
			_ = s.Unexpose(p)
		}
		srv.Stop()
	}
	for _, port := range []int{srv.HTTPPort(), srv.SSHPort()} {
		if err := s.ExposeHost(port); err != nil {
			stop()
			return nil, nil, fmt.Errorf("step 'expose the git server to the clusters' failed: %w", err)
		}
		unexpose = append(unexpose, port)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		stop()
		return nil, nil, err
	}
	// The user's key file, as age-keygen writes it: kept out of git.
	keyFile := filepath.Join(dir, "age.agekey")
	if err := os.WriteFile(keyFile, []byte("# public key: "+id.Recipient().String()+"\n"+id.String()+"\n"), 0o600); err != nil {
		stop()
		return nil, nil, err
	}
	files, err := writeGitCredentials(dir, srv, host)
	if err != nil {
		stop()
		return nil, nil, err
	}
	kc, err := s.Cluster("dev-1").PortableKubeconfig()
	if err != nil {
		stop()
		return nil, nil, err
	}
	g := &devenv.GitopsRepo{Server: srv, Host: host, Name: demoRepo, Recipient: id.Recipient().String(), Identity: id.String()}
	commit, err := g.Publish(filepath.Join(repoDir, "examples", "gitops"), map[string][]byte{"dev-1-kubeconfig": kc})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("step 'commit examples/gitops to the git server' failed: %w", err)
	}
	st.printf("git       examples/gitops committed to %s as %.8s: clusters/dev-1.yaml holds dev-1's kubeconfig encrypted with SOPS for %s (key %s)",
		srv.HTTPURL("127.0.0.1", demoRepo+".git"), commit, g.Recipient, keyFile)
	st.printf("git       clone it: git -c http.sslCAInfo=%s clone %s (user %s, password in %s)",
		files["ca.crt"], srv.HTTPURL("127.0.0.1", demoRepo+".git"), srv.Username, files["password"])

	for _, o := range g.Objects(5 * time.Second) {
		if err := upc.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			stop()
			return nil, nil, fmt.Errorf("step 'create %T %s/%s' failed: %w", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	st.printf("upstream  GitRepo %s/%s created with its client Secret and SOPS key Secret (%.1fs)", devenv.GitopsNamespace, demoRepo, time.Since(t).Seconds())

	t = time.Now()
	if _, err := devenv.ClusterReady(ctx, upc, "fleet-default", "dev-1", 4*time.Minute); err != nil {
		up := s.Clusters[0]
		return g, stop, fmt.Errorf("step 'dev-1 registered from git (manager-initiated)' failed: %w\nread: kubectl --kubeconfig %s -n %s get gitrepo %s -o yaml; kubectl --kubeconfig %s -n %s logs deploy/fleet-gitops; kubectl --kubeconfig %s -n %s logs deploy/fleet-controller",
			err, up.KubeconfigPath(), devenv.GitopsNamespace, demoRepo, up.KubeconfigPath(), devenv.SystemNamespace, up.KubeconfigPath(), devenv.SystemNamespace)
	}
	st.printf("dev-1     registered from git: fleet-gitops decrypted the kubeconfig, the local agent applied Cluster and Secret, the controller pushed the agent; Cluster Ready (%.1fs)", time.Since(t).Seconds())
	return g, stop, nil
}

// demoBump commits the pull request the design card names, a
// redeployAgentGeneration bump of dev-1, and shows that it rolls the agent
// exactly once: the agent Deployment's revision goes up by one and its pod
// runs with the new generation.
func demoBump(ctx context.Context, st *stepper, g *devenv.GitopsRepo, dev1 *devcluster.Cluster) error {
	cs, err := dev1.Clientset()
	if err != nil {
		return err
	}
	before, err := agentRevision(ctx, cs)
	if err != nil {
		return fmt.Errorf("step 'dev-1 agent revision' failed: %w", err)
	}
	t := time.Now()
	gen, commit, err := g.BumpRedeploy("clusters/dev-1.yaml")
	if err != nil {
		return fmt.Errorf("step 'commit a redeployAgentGeneration bump' failed: %w", err)
	}
	st.printf("git       committed %.8s: clusters/dev-1.yaml redeployAgentGeneration: %d (one line, in clear beside the encrypted kubeconfig)", commit, gen)
	var after int
	err = devenv.Poll(ctx, 3*time.Minute, func() error {
		d, err := cs.AppsV1().Deployments(devenv.SystemNamespace).Get(ctx, "fleet-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if after, err = revisionOf(d); err != nil {
			return err
		}
		env := ""
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "GENERATION" {
				env = e.Value
			}
		}
		if env != strconv.FormatInt(gen, 10) {
			return fmt.Errorf("agent Deployment at GENERATION=%q, want %d", env, gen)
		}
		if s := d.Status; s.ObservedGeneration < d.Generation || s.UpdatedReplicas != s.Replicas || s.AvailableReplicas != s.Replicas || s.Replicas == 0 {
			return fmt.Errorf("agent Deployment rolling out: %+v", s)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("step 'dev-1 agent rolled with the new generation' failed: %w", err)
	}
	time.Sleep(5 * time.Second) // a second rollout, if any, has the time to show
	if after, err = agentRevision(ctx, cs); err != nil {
		return err
	}
	if after != before+1 {
		return fmt.Errorf("step 'exactly one agent rollout' failed: the agent Deployment went from revision %d to %d", before, after)
	}
	st.printf("dev-1     agent rolled once: Deployment fleet-agent revision %d → %d, its pod runs with GENERATION=%d (%.1fs)", before, after, gen, time.Since(t).Seconds())
	return nil
}

func agentRevision(ctx context.Context, cs kubernetes.Interface) (int, error) {
	d, err := cs.AppsV1().Deployments(devenv.SystemNamespace).Get(ctx, "fleet-agent", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	return revisionOf(d)
}

func revisionOf(d *appsv1.Deployment) (int, error) {
	r, err := strconv.Atoi(d.Annotations["deployment.kubernetes.io/revision"])
	if err != nil {
		return 0, fmt.Errorf("agent Deployment has no revision yet")
	}
	return r, nil
}
