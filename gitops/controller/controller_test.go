package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/gitops/controller"
	"github.com/gitops-fleet/fleet/gitops/decrypt"
	"github.com/gitops-fleet/fleet/gitops/decrypt/sopstest"
)

// condition returns the GitRepo's condition of type typ ("" fields when
// absent).
func condition(g *fleet.GitRepo, typ string) metav1.Condition {
	if cond := meta.FindStatusCondition(g.Status.Conditions, typ); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

// A GitRepo over HTTP with basic auth deploys one Bundle per path, with
// the repo and commit labels and the GitRepo as controller; a commit that
// touches one path rewrites that Bundle only, and Trigger brings it at once
// (the GitRepo polls once an hour).
func TestGitRepo_DeploysAndRewritesOnlyChangedPaths(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "git", "s3cret")
	c1 := srv.commit(map[string]string{
		"a/cm.yaml": configMap("a", "1"), "a/fleet.yaml": "defaultNamespace: a\n",
		"b/cm.yaml": configMap("b", "1"), "b/fleet.yaml": "defaultNamespace: b\n",
	})
	basicAuth(t, ns, "git-auth", "git", "s3cret")
	g := gitRepo(t, ns, "apps", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.ClientSecretName = "git-auth"
		g.Spec.Paths = []string{"a", "b"}
	})

	var first map[string]fleet.Bundle
	testenv.Eventually(t, timeout, "both Bundles written from the first commit", func() error {
		first = bundles(t, g)
		if len(first) != 2 {
			return fmt.Errorf("Bundles %v", keys(first))
		}
		r := getRepo(t, g)
		if r.Status.Commit != c1 {
			return fmt.Errorf("status.commit %q, want %q", r.Status.Commit, c1)
		}
		return nil
	})
	r := getRepo(t, g)
	for name, b := range first {
		if b.Labels[fleet.CommitLabel] != c1 || b.Labels[fleet.RepoLabel] != "apps" {
			t.Errorf("Bundle %s labels %v", name, b.Labels)
		}
		if !metav1.IsControlledBy(&b, r) {
			t.Errorf("Bundle %s is not controlled by the GitRepo: %v", name, b.OwnerReferences)
		}
		if b.Annotations[controller.InputHashAnnotation] == "" {
			t.Errorf("Bundle %s has no input hash", name)
		}
	}
	if _, ok := first["apps-a"]; !ok {
		t.Fatalf("no Bundle apps-a: %v", keys(first))
	}
	if r.Status.PollingCommit != c1 || r.Status.LastPollingTime.IsZero() || r.Status.ObservedGeneration != r.Generation {
		t.Errorf("status: pollingCommit %q lastPollingTriggered %v observedGeneration %d (generation %d)",
			r.Status.PollingCommit, r.Status.LastPollingTime, r.Status.ObservedGeneration, r.Generation)
	}
	if a := condition(r, fleet.GitRepoAcceptedCondition); a.Status != metav1.ConditionTrue {
		t.Errorf("Accepted %+v", a)
	}

	c2 := srv.commit(map[string]string{"a/cm.yaml": configMap("a", "2")})
	rec.Trigger(key(g), "test")
	testenv.Eventually(t, timeout, "Bundle apps-a rewritten from the second commit", func() error {
		b := bundles(t, g)["apps-a"]
		if b.Labels[fleet.CommitLabel] != c2 {
			return fmt.Errorf("apps-a commit label %q, want %q", b.Labels[fleet.CommitLabel], c2)
		}
		if !strings.Contains(resourcesOf(b), `value: "2"`) {
			return fmt.Errorf("apps-a resources %q", resourcesOf(b))
		}
		if r := getRepo(t, g); r.Status.Commit != c2 {
			return fmt.Errorf("status.commit %q, want %q", r.Status.Commit, c2)
		}
		return nil
	})
	b := bundles(t, g)["apps-b"]
	if b.ResourceVersion != first["apps-b"].ResourceVersion || b.Labels[fleet.CommitLabel] != c1 {
		t.Errorf("apps-b was written again (resourceVersion %s, was %s; commit label %q, want the first commit's)",
			b.ResourceVersion, first["apps-b"].ResourceVersion, b.Labels[fleet.CommitLabel])
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func resourcesOf(b fleet.Bundle) string {
	var s strings.Builder
	for _, r := range b.Spec.Resources {
		s.WriteString(r.Name + ":\n" + r.Content + "\n")
	}
	return s.String()
}

// A bad fleet.yaml in one path leaves the other paths' Bundles written and
// the condition names the path and the field; a path removed meanwhile is
// not pruned while a path fails, and is pruned once every path reads.
func TestGitRepo_BadPathKeepsOthersAndPrunesOnlyAfterCompleteScan(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	srv.commit(map[string]string{
		"a/cm.yaml": configMap("a", "1"), "a/fleet.yaml": "defaultNamespace: a\n",
		"b/cm.yaml": configMap("b", "1"), "b/fleet.yaml": "defaultNamespace: b\n",
		"c/cm.yaml": configMap("c", "1"), "c/fleet.yaml": "defaultNamespace: c\n",
	})
	g := gitRepo(t, ns, "repo", srv.url(), nil)
	testenv.Eventually(t, timeout, "three Bundles", func() error {
		if got := keys(bundles(t, g)); len(got) != 3 {
			return fmt.Errorf("Bundles %v", got)
		}
		return nil
	})

	// b breaks (a misspelt field), c goes away, a changes.
	c2 := srv.commit(map[string]string{"b/fleet.yaml": "defaultNamespace: b\nhelm:\n  releaseNam: x\n", "c": "", "a/cm.yaml": configMap("a", "2")})
	rec.Trigger(key(g), "test")
	testenv.Eventually(t, timeout, "a written, b failing with its path and field, c kept", func() error {
		r := getRepo(t, g)
		ready := condition(r, fleet.ReadyCondition)
		if ready.Status != metav1.ConditionFalse || ready.Reason != controller.FleetYAMLInvalidReason {
			return fmt.Errorf("Ready %+v", ready)
		}
		for _, want := range []string{"b", "fleet.yaml", "releaseNam", "nothing pruned"} {
			if !strings.Contains(ready.Message, want) {
				return fmt.Errorf("Ready message %q does not name %q", ready.Message, want)
			}
		}
		if s := condition(r, "Stalled"); s.Status != metav1.ConditionTrue {
			return fmt.Errorf("Stalled %+v", s)
		}
		bs := bundles(t, g)
		if bs["repo-a"].Labels[fleet.CommitLabel] != c2 {
			return fmt.Errorf("repo-a not rewritten: %v", bs["repo-a"].Labels)
		}
		if _, ok := bs["repo-c"]; !ok {
			return fmt.Errorf("repo-c was pruned after an incomplete scan")
		}
		return nil
	})

	srv.commit(map[string]string{"b/fleet.yaml": "defaultNamespace: b\n"})
	rec.Trigger(key(g), "test")
	testenv.Eventually(t, timeout, "c pruned once every path reads", func() error {
		bs := bundles(t, g)
		if _, ok := bs["repo-c"]; ok {
			return fmt.Errorf("repo-c still there: %v", keys(bs))
		}
		if len(bs) != 2 {
			return fmt.Errorf("Bundles %v", keys(bs))
		}
		r := getRepo(t, g)
		if s := condition(r, "Stalled"); s.Status == metav1.ConditionTrue {
			return fmt.Errorf("still Stalled: %+v", s)
		}
		return nil
	})
}

// A repository a GitRepoRestriction does not allow is refused with the
// reason, and the git server gets no request at all.
func TestGitRepo_RefusedRepositoryReachesNoServer(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	rr := &fleet.GitRepoRestriction{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: "only-example"},
		AllowedRepoPatterns: []string{`https://git\.example\.com/.*`},
	}
	if err := c.Create(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	g := gitRepo(t, ns, "refused", srv.url(), nil)
	testenv.Eventually(t, timeout, "Accepted=False with the restriction's reason", func() error {
		r := getRepo(t, g)
		a := condition(r, fleet.GitRepoAcceptedCondition)
		if a.Status != metav1.ConditionFalse || a.Reason != fleet.RestrictionRefusedReason || !strings.Contains(a.Message, "spec.repo") {
			return fmt.Errorf("Accepted %+v", a)
		}
		return nil
	})
	rec.Trigger(key(g), "test")
	testenv.Consistently(t, 3*time.Second, "no request reaches the git server", func() error {
		if n := srv.infoRefs.Load() + srv.uploadPacks.Load(); n != 0 {
			return fmt.Errorf("%d requests", n)
		}
		if bs := bundles(t, g); len(bs) != 0 {
			return fmt.Errorf("Bundles %v", keys(bs))
		}
		return nil
	})

	// Allowing it lets it through: the restriction's change is watched.
	rr.AllowedRepoPatterns = append(rr.AllowedRepoPatterns, `http://127\.0\.0\.1:[0-9]+/.*`)
	if err := c.Update(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "accepted and deployed once the restriction allows it", func() error {
		if bs := bundles(t, g); len(bs) != 1 {
			return fmt.Errorf("Bundles %v", keys(bs))
		}
		return nil
	})
}

// Wrong credentials: AuthFailed, Stalled, no Bundle, and the password in
// no condition.
func TestGitRepo_WrongCredentialsAuthFailed(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "git", "right-password")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	basicAuth(t, ns, "git-auth", "git", "wrong-password-x")
	g := gitRepo(t, ns, "auth", srv.url(), func(g *fleet.GitRepo) { g.Spec.ClientSecretName = "git-auth" })
	testenv.Eventually(t, timeout, "Ready=False AuthFailed", func() error {
		r := getRepo(t, g)
		ready := condition(r, fleet.ReadyCondition)
		if ready.Reason != "AuthFailed" || condition(r, "Stalled").Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", ready)
		}
		if r.Status.GitJobStatus != "Failed" {
			return fmt.Errorf("gitJobStatus %q", r.Status.GitJobStatus)
		}
		return nil
	})
	r := getRepo(t, g)
	for _, cond := range r.Status.Conditions {
		if strings.Contains(cond.Message, "wrong-password-x") {
			t.Errorf("condition %s shows the password: %s", cond.Type, cond.Message)
		}
	}
	if strings.Contains(suite.Logs.String(), "wrong-password-x") {
		t.Error("the password is in the log")
	}
	if bs := bundles(t, g); len(bs) != 0 {
		t.Errorf("Bundles %v", keys(bs))
	}
}

// Two GitRepos on one repository, branch and credentials share the
// fetch and the checkout.
func TestGitRepo_TwoGitReposShareOneListAndFetch(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	commit := srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	g1 := gitRepo(t, ns, "one", srv.url(), nil)
	g2 := gitRepo(t, ns, "two", srv.url(), nil)
	testenv.Eventually(t, timeout, "both GitRepos at the commit", func() error {
		for _, g := range []*fleet.GitRepo{g1, g2} {
			if r := getRepo(t, g); r.Status.Commit != commit {
				return fmt.Errorf("%s at %q", g.Name, r.Status.Commit)
			}
		}
		return nil
	})
	// One fetch (shared: one upload-pack) and its info/refs; each new
	// GitRepo asks for a fresh ls-remote once (a GitRepo created after a
	// push reads that push), so at most three info/refs. Two GitRepos
	// fetching alone would make two upload-packs. (Polls after creation
	// share one answer: fleet-dev bench --only gitops counts them.)
	if refs, packs := srv.infoRefs.Load(), srv.uploadPacks.Load(); refs > 3 || packs != 1 {
		t.Errorf("the server served %d info/refs and %d upload-pack requests; want at most 3 and 1", refs, packs)
	}
}

// A SOPS-encrypted Secret is decrypted into a staged Secret of the
// GitRepo's namespace, named in the Bundle's downstreamResources; its value
// is in no Bundle.
func TestGitRepo_SOPSSecretIsStaged(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	id := sopstest.NewIdentity(t)
	plain := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\nstringData:\n  password: very-secret-value\n"
	enc := sopstest.Encrypt(t, "app/secret.yaml", []byte(plain), sopstest.ValuesOfSecrets, id.Recipient().String())
	srv := newServer(t, "", "")
	srv.commit(map[string]string{
		"app/cm.yaml": configMap("app", "1"), "app/fleet.yaml": "defaultNamespace: app\n",
		"app/secret.yaml": string(enc),
	})
	key := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sops-age"},
		Data:       map[string][]byte{"identity.agekey": []byte(id.String() + "\n")},
	}
	if err := c.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	g := gitRepo(t, ns, "sops", srv.url(), func(g *fleet.GitRepo) {
		g.Spec.Paths = []string{"app"}
		g.Spec.Decryption = &fleet.Decryption{Provider: "sops", SecretRef: fleet.LocalObjectReference{Name: "sops-age"}}
	})
	testenv.Eventually(t, timeout, "the Secret staged and named by the Bundle", func() error {
		b, ok := bundles(t, g)["sops-app"]
		if !ok {
			r := getRepo(t, g)
			return fmt.Errorf("no Bundle sops-app; Ready %+v", condition(r, fleet.ReadyCondition))
		}
		if !slices.Contains(b.Spec.DownstreamResources, fleet.DownstreamResource{Kind: "Secret", Name: "db"}) {
			return fmt.Errorf("downstreamResources %v", b.Spec.DownstreamResources)
		}
		s := &corev1.Secret{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "db"}, s); err != nil {
			return err
		}
		if string(s.Data["password"]) != "very-secret-value" || s.Labels[decrypt.LabelGitRepo] != "sops" {
			return fmt.Errorf("staged Secret labels %v, keys %v", s.Labels, keys(s.Data))
		}
		if res := resourcesOf(b); strings.Contains(res, "very-secret-value") || strings.Contains(res, "ENC[") {
			return fmt.Errorf("the Bundle holds the secret or its ciphertext: %s", res)
		}
		return nil
	})

	if strings.Contains(suite.Logs.String(), "very-secret-value") {
		t.Error("the decrypted value is in the log")
	}
	if r := getRepo(t, g); strings.Contains(fmt.Sprint(r.Status), "very-secret-value") {
		t.Error("the decrypted value is in the GitRepo's status")
	}

	// The file goes away: the staged copy is pruned.
	srv.commit(map[string]string{"app/secret.yaml": ""})
	rec.Trigger(types.NamespacedName{Namespace: ns, Name: "sops"}, "test")
	testenv.Eventually(t, timeout, "the staged Secret pruned", func() error {
		s := &corev1.Secret{}
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "db"}, s)
		if err == nil {
			return fmt.Errorf("Secret db still there")
		}
		return client.IgnoreNotFound(err)
	})
}

// A Bundle of the same name that someone else made is not overwritten: the
// path fails with BundleNameTaken.
func TestGitRepo_DoesNotTakeOverAnotherBundle(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	theirs := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-a", Labels: map[string]string{"owner": "someone"}},
		Spec:       fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "x.yaml", Content: configMap("x", "1")}}},
	}
	if err := c.Create(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	g := gitRepo(t, ns, "taken", srv.url(), func(g *fleet.GitRepo) { g.Spec.Paths = []string{"a"} })
	testenv.Eventually(t, timeout, "BundleNameTaken", func() error {
		ready := condition(getRepo(t, g), fleet.ReadyCondition)
		if ready.Reason != controller.BundleNameTakenReason || !strings.Contains(ready.Message, "taken-a") {
			return fmt.Errorf("Ready %+v", ready)
		}
		return nil
	})
	b := &fleet.Bundle{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(theirs), b); err != nil {
		t.Fatal(err)
	}
	if b.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("their Bundle was written: %v", b.Labels)
	}
}

// The source component's identity (testdata/rbac.yaml, which every test
// here runs the reconciler as) is refused what it does not need: listing
// or watching Secrets, writing GitRepos' spec or other kinds, reading
// ConfigMaps outside its namespace.
func TestIdentity_RefusedWhatItDoesNotNeed(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	g := gitRepo(t, ns, "identity", "https://git.example.com/x.git", nil)
	as, err := client.New(gitopsConfig, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refused := map[string]error{
		"list Secrets": as.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)),
		"update a GitRepo's spec": func() error {
			r := getRepo(t, g)
			r.Spec.Paths = []string{"elsewhere"}
			return as.Update(ctx, r)
		}(),
		"delete a GitRepo":               as.Delete(ctx, getRepo(t, g)),
		"create a BundleDeployment":      as.Create(ctx, &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bd"}}),
		"create a ConfigMap":             as.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}),
		"list ConfigMaps of a workspace": as.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)),
		"create a GitRepoRestriction":    as.Create(ctx, &fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rr"}}),
		"create a Cluster":               as.Create(ctx, &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}}),
	}
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
}

// forceSyncGeneration reads the repository again and sets every Bundle's
// forceSyncGeneration (so the agents deploy again); paused makes the Bundles
// paused; status.updateGeneration says it was acted on.
func TestGitRepo_ForceSyncGenerationAndPaused(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	g := gitRepo(t, ns, "force", srv.url(), func(g *fleet.GitRepo) { g.Spec.Paths = []string{"a"} })
	testenv.Eventually(t, timeout, "the Bundle", func() error {
		if bs := bundles(t, g); len(bs) != 1 {
			return fmt.Errorf("Bundles %v", keys(bs))
		}
		return nil
	})
	r := getRepo(t, g)
	patch := client.MergeFrom(r.DeepCopy())
	r.Spec.ForceSyncGeneration = 3
	r.Spec.Paused = true
	if err := c.Patch(context.Background(), r, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "forceSyncGeneration and paused on the Bundle", func() error {
		b := bundles(t, g)["force-a"]
		if b.Spec.ForceSyncGeneration != 3 || !b.Spec.Paused {
			return fmt.Errorf("Bundle forceSyncGeneration %d paused %v", b.Spec.ForceSyncGeneration, b.Spec.Paused)
		}
		r := getRepo(t, g)
		if r.Status.UpdateGeneration != 3 || r.Status.ObservedGeneration != r.Generation {
			return fmt.Errorf("updateGeneration %d observedGeneration %d (generation %d)", r.Status.UpdateGeneration, r.Status.ObservedGeneration, r.Generation)
		}
		return nil
	})
}

// A Bundle deleted by hand is written again without a new commit.
func TestGitRepo_DeletedBundleIsWrittenAgain(t *testing.T) {
	ns := testenv.Namespace(t, c, "gitops")
	srv := newServer(t, "", "")
	srv.commit(map[string]string{"a/cm.yaml": configMap("a", "1")})
	g := gitRepo(t, ns, "again", srv.url(), func(g *fleet.GitRepo) { g.Spec.Paths = []string{"a"} })
	var uid types.UID
	testenv.Eventually(t, timeout, "the Bundle", func() error {
		b, ok := bundles(t, g)["again-a"]
		if !ok {
			return fmt.Errorf("no Bundle again-a")
		}
		uid = b.UID
		return nil
	})
	if err := c.Delete(context.Background(), &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again-a"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, timeout, "the Bundle written again", func() error {
		b, ok := bundles(t, g)["again-a"]
		if !ok || b.UID == uid {
			return fmt.Errorf("not written again yet")
		}
		return nil
	})
}
