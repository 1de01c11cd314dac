package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/bundlewrite"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/kubeconfig"
	"github.com/gitops-fleet/fleet/internal/scheme"
)

// applyFlags are fleet apply's flags: Fleet's GitRepo-level options, where
// the Bundles go, and where the checkout is.
type applyFlags struct {
	output, namespace, targetsFile, serviceAccount, targetNamespace, commit, root string
	labels                                                                        map[string]string
	syncGeneration                                                                int64
	paused, keepResources, deleteNamespace, compress                              bool
	correctDrift, correctDriftForce, correctDriftKeepFailHistory                  bool
	upstream                                                                      rolloutFlags
	charts                                                                        chartFlags
}

func newApplyCommand() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply [flags] NAME [PATH...]",
		Short: "Make the Bundles of a checkout's directories (fleet.yaml, as Fleet's fleet apply) and print or apply them",
		Long: `Read the directories of a checkout as Fleet's fleet apply does and make their Bundles:
every directory under the PATHs (globs, relative to --root, default the current directory;
none: the root) that holds a fleet.yaml, and a PATH's own directory when it holds manifests
that no fleet.yaml directory takes. NAME is the GitRepo's name: Bundles are named
NAME-<path> (Fleet's names) and labelled fleet.cattle.io/repo-name=NAME.

With -o FILE (-o - for standard output) the Bundles are written as YAML documents, with no
cluster. Otherwise they are applied (server-side apply) in --namespace of the cluster of
--kubeconfig/--context, and the Bundles labelled with NAME that the checkout no longer
makes are deleted: only when every path was read and written. A path whose fleet.yaml,
values files or chart is wrong is reported with its file, line and field; the other
paths' Bundles are still written, and nothing is pruned.

Charts from repositories (helm.repo, oci:// or https:// in helm.chart) are fetched from
this machine and embedded in the Bundle under .chart/<sha256>/, as Fleet's fleet apply does
(the controller never fetches). Credentials (--username, --password-file) are sent only to
references --helm-repo-url-regex matches, only over https, and never after a redirect to
another host.

Exit status: 0 every path written; 1 a path failed (the others were written) or the
cluster refused; 2 a usage error.`,
		Example: `  fleet apply -o - my-repo simple multi-cluster/*
  fleet apply --root ./checkout --targets-file targets.yaml -n fleet-default my-repo apps
  COMMIT=$(git rev-parse HEAD) fleet apply --context upstream -n fleet-default my-repo`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("commit") {
				f.commit = os.Getenv("COMMIT")
			}
			return runApply(cmd, f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", "write the Bundles to this file as YAML (- for standard output) instead of applying them")
	fl.StringVarP(&f.namespace, "namespace", "n", "fleet-local", "the namespace (workspace) of the Bundles: the GitRepo's")
	fl.StringVar(&f.root, "root", ".", "the checkout: PATHs are relative to it")
	fl.StringToStringVarP(&f.labels, "label", "l", nil, "labels of every Bundle (k=v,k2=v2; repeatable)")
	fl.StringVar(&f.commit, "commit", "", "the commit, set as label fleet.cattle.io/commit (default $COMMIT)")
	fl.StringVar(&f.targetsFile, "targets-file", "", "the GitRepo's targets: a YAML or JSON document with targets and targetRestrictions (Fleet's format)")
	fl.StringVarP(&f.serviceAccount, "service-account", "a", "", "the serviceAccount of every Bundle")
	fl.Int64Var(&f.syncGeneration, "sync-generation", 0, "the forceSyncGeneration of every Bundle")
	fl.BoolVar(&f.paused, "paused", false, "make the Bundles paused")
	fl.StringVar(&f.targetNamespace, "target-namespace", "", "the namespace of every Bundle and target")
	fl.BoolVar(&f.keepResources, "keep-resources", false, "keep the resources downstream when a Bundle is deleted")
	fl.BoolVar(&f.deleteNamespace, "delete-namespace", false, "delete the target namespace downstream when a Bundle is deleted")
	fl.BoolVar(&f.correctDrift, "correct-drift", false, "revert changes made downstream")
	fl.BoolVar(&f.correctDriftForce, "correct-drift-force", false, "with --correct-drift: delete and recreate what cannot be patched back")
	fl.BoolVar(&f.correctDriftKeepFailHistory, "correct-drift-keep-fail-history", false, "with --correct-drift: accepted for Fleet's command lines (no Helm history here)")
	fl.BoolVarP(&f.compress, "compress", "c", false, "store every resource base64+gz")
	fl.StringVar(&f.upstream.kubeconfig, "kubeconfig", "", "your kubeconfig for the upstream cluster (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&f.upstream.context, "context", "", "the context of your kubeconfig to use (default: its current context)")
	f.charts.add(cmd)
	return cmd
}

func runApply(cmd *cobra.Command, f applyFlags, name string, paths []string) error {
	opts := bundlereader.Options{
		Namespace: f.namespace, Labels: f.labels, Commit: f.commit, ServiceAccount: f.serviceAccount,
		TargetNamespace: f.targetNamespace, Paused: f.paused, SyncGeneration: f.syncGeneration,
		KeepResources: f.keepResources, DeleteNamespace: f.deleteNamespace, Compress: f.compress,
	}
	charts, err := f.charts.fetcher(cmd)
	if err != nil {
		return err
	}
	opts.Charts = charts
	if f.correctDrift {
		opts.CorrectDrift = &fleet.CorrectDrift{Enabled: true, Force: f.correctDriftForce, KeepFailHistory: f.correctDriftKeepFailHistory}
	}
	if f.targetsFile != "" {
		data, err := os.ReadFile(f.targetsFile)
		if err != nil {
			return err
		}
		tf, err := bundlereader.ReadTargetsFile(f.targetsFile, data)
		if err != nil {
			return err
		}
		opts.Targets, opts.TargetRestrictions = tf.Targets, tf.TargetRestrictions
	}
	res, err := bundlereader.Read(cmd.Context(), f.root, name, paths, opts)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	for _, e := range res.Errors {
		fmt.Fprintf(stderr, "path %s\n", indentLines(e.Error()))
	}
	if f.output != "" {
		if err := writeBundles(cmd.OutOrStdout(), f.output, res.Bundles); err != nil {
			return err
		}
		return pathsFailed(res, nil)
	}

	u, err := kubeconfig.LoadUpstream(f.upstream.kubeconfig, f.upstream.context)
	if err != nil {
		return err
	}
	c, err := client.New(u.REST, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return u.Explain(err, "Bundles")
	}
	// Server-side apply requests are always validated strictly.
	ctx := cmd.Context()
	mgr := apply.NewManager(c)
	var failed []string
	for _, b := range res.Bundles {
		entry, err := applyBundle(ctx, c, mgr, name, b.Bundle)
		if err != nil {
			failed = append(failed, b.Path)
			fmt.Fprintf(stderr, "path %s: Bundle %s/%s: %v\n", b.Path, b.Bundle.Namespace, b.Bundle.Name, u.Explain(err, "Bundle "+b.Bundle.Name))
			continue
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Bundle %s/%s %s\n", b.Bundle.Namespace, b.Bundle.Name, entry.Action)
	}
	if err := prune(ctx, cmd.OutOrStdout(), c, name, f.namespace, res, failed); err != nil {
		return u.Explain(err, "Bundles")
	}
	return pathsFailed(res, failed)
}

// indentLines keeps a multi-line error (several mistakes of one fleet.yaml)
// readable under its path.
func indentLines(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }

// pathsFailed is the command's error when a path failed to read or write.
func pathsFailed(res *bundlereader.Result, writeFailed []string) error {
	var paths []string
	for _, e := range res.Errors {
		paths = append(paths, e.Path)
	}
	paths = append(paths, writeFailed...)
	if len(paths) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d paths failed (%s): see above; the other paths' Bundles were written", len(paths), len(paths)+len(res.Bundles)-len(writeFailed), strings.Join(paths, ", "))
}

// writeBundles writes the Bundles as YAML documents to file (- : out).
func writeBundles(out io.Writer, file string, bundles []bundlereader.Bundle) error {
	var buf bytes.Buffer
	for i, b := range bundles {
		obj, err := bundlewrite.Object(b.Bundle)
		if err != nil {
			return err
		}
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(data)
	}
	if file == "-" {
		_, err := out.Write(buf.Bytes())
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// applyBundle applies one Bundle, refusing to take over a Bundle another
// GitRepo (or anything but fleet apply for this one) made: a fleet.yaml
// name must not overwrite someone else's Bundle, an agent's included.
func applyBundle(ctx context.Context, c client.Client, mgr *ssa.ResourceManager, repo string, b *fleet.Bundle) (*ssa.ChangeSetEntry, error) {
	existing := &fleet.Bundle{}
	err := c.Get(ctx, client.ObjectKeyFromObject(b), existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return nil, err
	}
	if err := bundlewrite.CheckTakeover(existing, repo, ""); err != nil {
		return nil, err
	}
	obj, err := bundlewrite.Object(b)
	if err != nil {
		return nil, err
	}
	return mgr.Apply(ctx, obj, ssa.DefaultApplyOptions())
}

// prune deletes the Bundles of repo in namespace that the checkout no
// longer makes, only after a complete read and write: an incomplete one
// might have missed a path's Bundle.
func prune(ctx context.Context, out io.Writer, c client.Client, repo, namespace string, res *bundlereader.Result, writeFailed []string) error {
	list := &fleet.BundleList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{fleet.RepoLabel: repo}); err != nil {
		return err
	}
	made := map[string]bool{}
	for _, b := range res.Bundles {
		made[b.Bundle.Name] = true
	}
	var stale []string
	for _, b := range list.Items {
		if !made[b.Name] {
			stale = append(stale, b.Name)
		}
	}
	slices.Sort(stale)
	if len(stale) == 0 {
		return nil
	}
	if !res.Complete() || len(writeFailed) > 0 {
		fmt.Fprintf(out, "not pruned, since not every path was read and written: Bundle %s/%s kept\n", namespace, strings.Join(stale, ", "+namespace+"/"))
		return nil
	}
	for _, name := range stale {
		b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		if err := c.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		fmt.Fprintf(out, "Bundle %s/%s pruned (no longer in the checkout)\n", namespace, name)
	}
	return nil
}
