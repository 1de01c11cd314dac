package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/bundleoptions"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/review"
)

func newDiffCommand() *cobra.Command {
	var base, head, path, configPath, output, format, kubeconfigPath, kubeContext string
	var live bool
	cmd := &cobra.Command{
		Use:   "diff --base <dir|git ref> --head <dir|git ref>",
		Short: "Review a change to the registration objects: what it does to each cluster's agent and Bundles",
		Long: `Compare two versions of a fleet GitOps repository, offline: each side is built as a GitOps
tool builds it (kustomize when the directory holds a kustomization, otherwise every YAML file
below it), every Cluster's agent is rendered with the controller's own renderer and
configuration, and for each cluster the report says what its agent manifests change (a unified
diff; Secrets' values masked), whether the controller deploys the agent again (pushed again for
manager-initiated clusters, its agent Bundle for agent-initiated ones) and whether its pod rolls,
and which Bundles start or stop deploying to it. ClusterRegistrationTokens' values files are
compared too. kubeconfig Secrets are read only for the server they name, never shown.

A side is a directory, or a git ref of the repository around the current directory (then --path
names the directory inside it). --config names the controller configuration (a fleet-controller
ConfigMap or its config document) relative to each side; without it, a fleet-controller
ConfigMap among the objects is used, else the defaults.

--live asks, in addition, each cluster whose agent the change deploys again what the new agent
objects would really change there: a server-side dry run through the upstream's cluster proxy
(fleet kubeconfig's path), as you, under the controller's field manager. It asks the same of
every Bundle the change deploys anew to a cluster (it starts deploying there, changes target,
or changes): its objects as rendered for that cluster (fleet render bundle) are dry-run as the
agent applies them, and compared as the agent's drift check compares: what the Bundle's
diff.comparePatches leave out is not a change ("differs only in what diff.comparePatches leave
out"); a Bundle already deployed as the head side has it says "nothing changes on the cluster".
Helm hooks are not dry-run.

-o picks the output: text (default), markdown (a pull-request comment) or json (one document, for
bots). --format is the same flag under its older name.

A side without any fleet object (Cluster, ClusterRegistrationToken, Bundle, ClusterGroup) is
warned about on stderr: probably the wrong directory or --path. Neither side with any is an error.
A kubeconfig Secret encrypted with SOPS cannot be read: the report says "server not checked" for
its Cluster.

Exit status: 0 no change, 1 changes, 2 an error (a usage error, broken YAML, a missing side, no
fleet object on either side, a Cluster that does not render), so a CI job can tell them apart.`,
		Example: `  fleet diff --base main --head HEAD --path examples/gitops --config config/fleet-controller.yaml
  fleet diff --base ./before --head ./after -o markdown > comment.md
  fleet diff --base main --head HEAD -o json | jq '.clusters[] | select(.rolls) | .cluster'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fail := func(err error) error { return &exitError{Code: exitUsage, Err: err} }
			if cmd.Flags().Changed("format") {
				if cmd.Flags().Changed("output") && output != format {
					return usageError("-o %s and --format %s disagree: give one (--format is the older name of -o)", output, format)
				}
				output = format
			}
			if output != "text" && output != "markdown" && output != "json" {
				return usageError("-o/--output must be text, markdown or json, not %q", output)
			}
			tmp, err := os.MkdirTemp("", "fleet-diff-")
			if err != nil {
				return fail(err)
			}
			defer os.RemoveAll(tmp)
			trees := make([]*review.Tree, 2)
			for i, s := range []string{base, head} {
				dir, source, err := resolveSide(s, path, filepath.Join(tmp, fmt.Sprint(i)))
				if err != nil {
					return fail(err)
				}
				if trees[i], err = review.Load(dir, source, configPath); err != nil {
					return fail(err)
				}
			}
			switch b, h := trees[0].HasFleetObjects(), trees[1].HasFleetObjects(); {
			case !b && !h:
				return fail(fmt.Errorf("neither %s nor %s holds a fleet object (Cluster, ClusterRegistrationToken, Bundle, ClusterGroup): give the directory of your fleet GitOps repository (--path with git refs)", trees[0].Source, trees[1].Source))
			case !b || !h:
				t := trees[0]
				if b {
					t = trees[1]
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s holds no fleet object (Cluster, ClusterRegistrationToken, Bundle, ClusterGroup): is it the right directory (--path)?\n", t.Source)
			}
			r, err := review.Diff(trees[0], trees[1])
			if err != nil {
				return fail(err)
			}
			if live {
				configFor, err := liveConfigs(kubeconfigPath, kubeContext)
				if err != nil {
					return fail(err)
				}
				r.Live(cmd.Context(), configFor)
				r.LiveBundles(cmd.Context(), configFor, bundleRenderer(trees[1], rolloutFlags{kubeconfig: kubeconfigPath, context: kubeContext}))
			}
			out := cmd.OutOrStdout()
			switch output {
			case "markdown":
				err = r.Markdown(out)
			case "json":
				err = r.JSON(out)
			default:
				err = r.Text(out)
			}
			if err != nil {
				return fail(err)
			}
			if r.Changed() {
				return &exitError{Code: exitFailed} // the report says what
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&base, "base", "", "the version before the change: a directory or a git ref (required)")
	f.StringVar(&head, "head", "", "the version after the change: a directory or a git ref (required)")
	f.StringVar(&path, "path", ".", "with a git ref: the directory inside the repository")
	f.StringVar(&configPath, "config", "", "the controller configuration, relative to each side (default: a fleet-controller ConfigMap among the objects, else the defaults)")
	f.StringVarP(&output, "output", "o", "text", "output format: text, markdown (a pull-request comment) or json")
	f.StringVar(&format, "format", "", "the older name of -o/--output (text or markdown)")
	f.BoolVar(&live, "live", false, "also dry-run the new agent objects on each cluster whose agent is deployed again, through the upstream's cluster proxy as you (needs clusters/proxy and rights downstream)")
	f.StringVar(&kubeconfigPath, "kubeconfig", "", "with --live: your kubeconfig for the upstream (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&kubeContext, "context", "", "with --live: the context of your kubeconfig (default: its current context)")
	_ = cmd.MarkFlagRequired("base")
	_ = cmd.MarkFlagRequired("head")
	return cmd
}

// resolveSide returns the directory of one side: s itself when it is a
// directory, else the tree of git ref s at path, extracted into into.
func resolveSide(s, path, into string) (dir, source string, err error) {
	if st, err := os.Stat(s); err == nil && st.IsDir() {
		return s, s, nil
	}
	if strings.HasPrefix(s, "-") {
		return "", "", fmt.Errorf("%q is neither a directory nor a git ref", s)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", "", fmt.Errorf("%q is not a directory, and there is no git repository here to read it as a ref from", s)
	}
	root := strings.TrimSpace(string(top))
	// path is relative to the current directory, as the user typed it.
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", "", fmt.Errorf("--path %s is outside the git repository %s", path, root)
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", s+"^{commit}").Run(); err != nil {
		return "", "", fmt.Errorf("%q is neither a directory nor a git ref of %s", s, root)
	}
	c := exec.Command("git", "-C", root, "archive", "--format=tar", s, "--", rel)
	stdout, err := c.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		return "", "", err
	}
	if err := untar(stdout, into); err != nil {
		_ = c.Wait()
		return "", "", fmt.Errorf("reading %s:%s: %w", s, rel, err)
	}
	if err := c.Wait(); err != nil {
		return "", "", fmt.Errorf("git archive %s -- %s: %v: %s", s, rel, err, strings.TrimSpace(stderr.String()))
	}
	dir = filepath.Join(into, rel)
	if _, err := os.Stat(dir); err != nil {
		return "", "", fmt.Errorf("%s has no %s", s, rel)
	}
	if rel == "." {
		return dir, s, nil
	}
	return dir, s + ":" + filepath.ToSlash(rel), nil
}

// untar extracts regular files and directories of a tar stream into dir,
// refusing names that leave it.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("the archive names %q, outside its root", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, io.LimitReader(tr, 64<<20)); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}

// liveConfigs reaches each Cluster through the upstream's cluster proxy with
// the caller's kubeconfig (what `fleet kubeconfig` writes).
func liveConfigs(path, context string) (review.ClusterConfig, error) {
	upstream, err := kubeconfig.LoadUpstream(path, context)
	if err != nil {
		return nil, fmt.Errorf("--live: %w", err)
	}
	return func(ws, name string) (*rest.Config, error) {
		kc, err := kubeconfig.ForCluster(upstream.Raw, kubeconfig.ClusterRef{Workspace: ws, Name: name}, kubeconfig.Options{Context: upstream.Context})
		if err != nil {
			return nil, err
		}
		return clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	}, nil
}

// bundleRenderer renders a Bundle of the head side for one of its Clusters
// as the controller does (render bundle's path: the Bundle's options with
// its target's, a render worker, valuesFrom read from the upstream).
func bundleRenderer(head *review.Tree, upstream rolloutFlags) review.BundleRender {
	var pool *renderworker.Pool
	return func(ctx context.Context, b *fleet.Bundle, c *fleet.Cluster) ([]byte, fleet.BundleDeploymentOptions, error) {
		if err := bundleoptions.Check(&b.Spec); err != nil {
			return nil, fleet.BundleDeploymentOptions{}, fmt.Errorf("not deployed (%s): %w", fleet.UnsupportedOptionReason, err)
		}
		b, err := bundleWithValues(ctx, upstream, "", b)
		if err != nil {
			return nil, fleet.BundleDeploymentOptions{}, err
		}
		opts, t, err := renderer.OptionsFor(b, c, targeting.Groups{Items: head.Groups[b.Namespace], Given: true})
		if err != nil {
			return nil, opts, err
		}
		if t == nil || t.DoNotDeploy {
			return nil, opts, fmt.Errorf("%s", targeting.Describe(b, c, t))
		}
		values := &renderer.ClusterValues{Cluster: renderer.ContextOf(c)}
		if values.ValuesFrom, err = readValuesFrom(ctx, upstream, b, opts); err != nil {
			return nil, opts, err
		}
		if pool == nil {
			cfg := head.Config
			if pool, err = renderworker.NewPool(func() renderworker.Limits { return renderworker.LimitsOf(cfg) }); err != nil {
				return nil, opts, err
			}
		}
		resources, err := bundleResources(ctx, upstream, "", b)
		if err != nil {
			return nil, opts, err
		}
		out, err := pool.RenderFor(ctx, b.Name, resources, opts, values)
		if re := (*renderworker.RenderError)(nil); errors.As(err, &re) {
			return nil, opts, fmt.Errorf("%s (%s)", re.Message, re.Reason)
		}
		if err != nil {
			return nil, opts, err
		}
		return out.YAML, opts, nil
	}
}
