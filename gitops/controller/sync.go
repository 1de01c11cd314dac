package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/gitsource"
	"github.com/gitops-fleet/fleet/gitops/restriction"
	"github.com/gitops-fleet/fleet/internal/reconciler"
)

// restrict evaluates the GitRepoRestrictions of the GitRepo's namespace
// read through reader. refused: the status says why (p.refusal), and the
// pass must neither read git nor write a Bundle.
func (p *pass) restrict(ctx context.Context, reader client.Reader) (eff restriction.Effective, refused bool, err error) {
	restrictions := &fleet.GitRepoRestrictionList{}
	if err := reader.List(ctx, restrictions, client.InNamespace(p.repo.Namespace)); err != nil {
		return eff, false, err
	}
	eff, err = restriction.Evaluate(p.repo, restrictions.Items, restriction.Options{AllowInsecureSkipTLSVerify: p.r.config().AllowGitInsecureSkipTLSVerify})
	if err != nil {
		var ref *restriction.Refusal
		if errors.As(err, &ref) {
			p.refusal = ref
			p.r.setMemo(p.key, nil)
			return eff, true, nil
		}
		return eff, false, err
	}
	p.eff = eff
	return eff, false, nil
}

// run is the pass: restrictions, then, when due, git and the Bundles. Its
// error is the status' Sync (nil: the Bundles are the commit's).
func (p *pass) run(ctx context.Context) error {
	repo := p.repo
	cfg := p.r.config()
	eff, refused, err := p.restrict(ctx, p.r.client)
	if err != nil || refused {
		return err
	}
	interval := pollingInterval(repo)

	if repo.Spec.Decryption != nil && repo.Spec.Decryption.Provider != "sops" {
		return reconciler.Stall(UnsupportedOptionReason, "spec.decryption.provider %q is not supported: the only provider is sops (with age keys)", repo.Spec.Decryption.Provider)
	}
	if len(repo.Spec.Bundles) > 0 {
		return reconciler.Stall(UnsupportedOptionReason, "spec.bundles (Fleet's driven scan) is not supported yet: list the directories in spec.paths, each with its fleet.yaml")
	}

	effJSON, _ := json.Marshal(eff)
	m := p.r.getMemo(p.key)
	forceGen := repo.Spec.ForceSyncGeneration != repo.Status.UpdateGeneration
	due := p.forced || forceGen || m.polled.IsZero() || m.dirty || m.gen != repo.Generation ||
		(interval > 0 && !p.now.Before(m.polled.Add(interval)))
	if !due {
		// Nothing to ask git: the status of the Bundles only. Without
		// polling, only a webhook, a trigger or a change brings it back.
		if interval > 0 {
			p.next = max(m.polled.Add(interval).Sub(p.now), time.Second)
		}
		return m.err
	}
	p.next = interval

	// Git is about to be read: the restrictions again, uncached. The
	// cache may not yet hold a GitRepoRestriction created a moment ago,
	// and a refused repository must see no request at all.
	if eff, refused, err = p.restrict(ctx, p.r.apiReader); err != nil || refused {
		return err
	}
	effJSON, _ = json.Marshal(eff)

	// Credentials: read uncached, never kept.
	source := gitsource.Repository{
		URL: repo.Spec.Repo, Branch: repo.Spec.Branch, Revision: repo.Spec.Revision,
		CABundle: repo.Spec.CABundle, InsecureSkipTLSVerify: repo.Spec.InsecureSkipTLSverify,
	}
	var versions []string
	if eff.ClientSecretName != "" {
		s, err := p.secret(ctx, "clientSecretName", eff.ClientSecretName)
		if err != nil {
			return p.remember(m, "", err)
		}
		creds, err := gitsource.ParseCredentials(s.Data)
		if err != nil {
			return p.remember(m, "", reconciler.Stall(string(gitsource.ReasonInvalid), "clientSecretName %q: %v", eff.ClientSecretName, err))
		}
		source.Credentials = creds
		versions = append(versions, "client="+s.ResourceVersion)
	}

	// ls-remote: shared with GitRepos of the same repository and
	// credentials, fresh after a trigger, a forced sync or a new
	// generation (a GitRepo just created or changed reads the commit
	// pushed before it, not another GitRepo's answer of a few seconds
	// ago; a restart alone keeps sharing).
	var notBefore time.Time
	if p.forced || forceGen || repo.Status.ObservedGeneration != repo.Generation {
		notBefore = p.now
	}
	resolved, err := p.r.opts.Cache.Resolve(ctx, source, notBefore)
	repo.Status.LastPollingTime = metav1.NewTime(p.now)
	if err != nil {
		return p.remember(m, "", gitError(err))
	}
	repo.Status.PollingCommit = resolved.Commit

	// Everything else a Bundle depends on besides the commit.
	keys, helm, err := p.inputSecrets(ctx, &versions)
	if err != nil {
		return p.remember(m, "", err)
	}
	inputs := hashOf(resolved.Commit, repo.Generation, repo.Spec.ForceSyncGeneration, string(effJSON), strings.Join(versions, ","),
		fmt.Sprint(cfg.AllowGitInsecureSkipTLSVerify))
	if !m.dirty && m.inputs == inputs && m.err == nil && m.complete && repo.Status.Commit == resolved.Commit {
		// The same commit and options: the Bundles are as they should be.
		m.polled = p.now
		p.r.setMemo(p.key, &m)
		return nil
	}

	snap, err := p.r.opts.Cache.Checkout(ctx, source, notBefore)
	if err != nil {
		return p.remember(m, "", gitError(err))
	}
	defer snap.Close()
	repo.Status.PollingCommit = snap.Commit
	if snap.Commit != resolved.Commit {
		inputs = hashOf(snap.Commit, repo.Generation, repo.Spec.ForceSyncGeneration, string(effJSON), strings.Join(versions, ","),
			fmt.Sprint(cfg.AllowGitInsecureSkipTLSVerify))
	}

	res, err := bundlereader.Read(ctx, snap.Dir, repo.Name, repo.Spec.Paths, p.readOptions(snap.Commit, helm))
	if err != nil {
		return p.remember(m, inputs, reconciler.Stall(FleetYAMLInvalidReason, "%v", err))
	}
	if sel := p.eff.AllowedTargetNamespaceSelector; sel != nil {
		// The restrictions' namespace selector, checked downstream on the
		// target namespace's labels.
		for _, b := range res.Bundles {
			b.Bundle.Spec.AllowedTargetNamespaceSelector = sel.DeepCopy()
		}
	}
	pathErrs := res.Errors
	staged, decryptErrs := p.decrypt(ctx, res, keys)
	pathErrs = append(pathErrs, decryptErrs...)

	w := p.write(ctx, res, staged, snap.Commit)
	if w.transient != nil {
		return p.remember(m, "", w.transient)
	}
	complete := res.Complete() && len(decryptErrs) == 0 && len(w.failed) == 0
	pruneNote := ""
	if complete {
		for name := range m.staged {
			w.previous[name] = true
		}
		if err := p.prune(ctx, w.made, w.secrets, w.previous); err != nil {
			return p.remember(m, "", err)
		}
	} else {
		pruneNote = "; nothing pruned, since not every path was read and written"
	}
	repo.Status.Commit = snap.Commit
	repo.Status.UpdateGeneration = repo.Spec.ForceSyncGeneration

	var syncErr error
	switch {
	case len(pathErrs) > 0:
		syncErr = reconciler.Stall(FleetYAMLInvalidReason, "%s%s", pathsMessage(pathErrs, w.failed), pruneNote)
	case len(w.failed) > 0:
		syncErr = reconciler.Stall(BundleNameTakenReason, "%s%s", pathsMessage(nil, w.failed), pruneNote)
	}
	// What this pass staged, and (when it could not prune) what earlier
	// passes did: the next complete pass prunes what is no longer staged.
	if !complete {
		for name := range m.staged {
			w.secrets[name] = true
		}
	}
	m = memo{polled: p.now, gen: repo.Generation, inputs: inputs, err: syncErr, complete: complete, staged: w.secrets}
	p.r.setMemo(p.key, &m)
	return syncErr
}

// remember records a sync that ended before the Bundles were written: a
// stall is reported again until the next poll; a transient error is retried
// (the next pass is due).
func (p *pass) remember(m memo, inputs string, err error) error {
	if isStalled(err) {
		m.polled, m.gen, m.inputs, m.err, m.complete, m.dirty = p.now, p.repo.Generation, inputs, err, false, false
		p.r.setMemo(p.key, &m)
		return err
	}
	// Due again at once (with backoff); what earlier passes staged is kept.
	p.r.setMemo(p.key, &memo{staged: m.staged})
	return err
}

// secret reads a Secret of the GitRepo's namespace, uncached. Missing, it
// stalls: the user must create it (the next poll looks again).
func (p *pass) secret(ctx context.Context, field, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := p.r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.repo.Namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil, reconciler.Stall(SecretInvalidReason, "%s: Secret %s/%s does not exist: create it", field, p.repo.Namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s Secret %s/%s: %w", field, p.repo.Namespace, name, err)
	}
	return s, nil
}

func hashOf(parts ...any) string {
	h := sha256.New()
	for _, part := range parts {
		fmt.Fprintf(h, "%v\x00", part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readOptions are every GitRepo option the reader takes.
func (p *pass) readOptions(commit string, helm *helmAuth) bundlereader.Options {
	repo := p.repo
	opts := bundlereader.Options{
		Namespace: repo.Namespace, Commit: commit,
		ServiceAccount: p.eff.ServiceAccount, TargetNamespace: p.eff.TargetNamespace,
		Paused: repo.Spec.Paused, KeepResources: repo.Spec.KeepResources, DeleteNamespace: repo.Spec.DeleteNamespace,
		SyncGeneration: repo.Spec.ForceSyncGeneration,
		Charts:         &chartFetcher{f: p.r.opts.Charts, auth: helm},
		Concurrency:    2,
	}
	if cd := repo.Spec.CorrectDrift; cd != nil && cd.Enabled {
		opts.CorrectDrift = cd.DeepCopy()
	}
	var targets []fleet.BundleTargetRestriction
	for _, t := range repo.Spec.Targets {
		targets = append(targets, fleet.BundleTargetRestriction{
			Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector,
		})
	}
	opts.Targets, opts.TargetRestrictions = bundlereader.GitRepoTargets(targets)
	return opts
}

// pathsMessage names every failed path and why.
func pathsMessage(errs []*bundlereader.PathError, failed []pathFailure) string {
	var b strings.Builder
	n := len(errs) + len(failed)
	fmt.Fprintf(&b, "%d path(s) failed, the others' Bundles were written:", n)
	for _, e := range errs {
		b.WriteString("\npath ")
		b.WriteString(e.Error())
	}
	for _, f := range failed {
		fmt.Fprintf(&b, "\npath %s: Bundle %s: %v", f.path, f.bundle, f.err)
	}
	return b.String()
}
