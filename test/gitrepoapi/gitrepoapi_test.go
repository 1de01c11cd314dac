// Package gitrepoapi_test serves the GitRepo and GitRepoRestriction CRDs
// (kustomize/base/crds) from a real API server: manifests shaped like
// Fleet's are accepted under strict field validation (kubectl's default) and
// read back as written; what the CRDs refuse is refused with a message that
// says what to write; the status gitops/status computes, bounded lists and
// all, is accepted; kubectl's columns are Fleet's; GitRepoRestrictions read
// from the API server refuse what they should through gitops/restriction.
package gitrepoapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/gitops/restriction"
	"github.com/gitops-fleet/fleet/gitops/status"
)

var env *controlplane.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{NoControllerManager: true}}, func(s *testenv.Suite) error {
		env = s.Env
		return nil
	})
}

// strict is kubectl's default field validation: an unknown or duplicate
// field is an error.
var strict = client.FieldValidation("Strict")

// gitRepoYAML is a GitRepo as Fleet's users write them: every spec field
// Fleet has (the image-scan and OCI-storage ones included), targets by
// selector, group and name, drift correction, a CA bundle.
const gitRepoYAML = `
apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepo
metadata:
  name: apps
spec:
  repo: https://git.example.com/platform/apps.git
  branch: main
  revision: ""
  paths:
  - web
  - charts/*
  clientSecretName: git-auth
  helmSecretName: helm-auth
  helmSecretNameForPaths: helm-auth-paths
  helmRepoURLRegex: https://charts\.example\.com/.*
  caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
  insecureSkipTLSVerify: false
  pollingInterval: 1m30s
  disablePolling: false
  webhookSecret: apps-webhook
  forceSyncGeneration: 2
  paused: false
  targetNamespace: apps
  serviceAccount: apps-deployer
  keepResources: true
  deleteNamespace: false
  correctDrift:
    enabled: true
    force: false
    keepFailHistory: true
  ociRegistrySecret: oci-storage
  imageScanInterval: 5m
  imageScanCommit:
    authorName: fleet
    authorEmail: fleet@example.com
    messageTemplate: "update {{ .Name }}"
  bundles:
  - base: web
    options: fleet.yaml
  targets:
  - name: prod
    clusterSelector:
      matchLabels:
        env: prod
      matchExpressions:
      - key: region
        operator: In
        values: [eu, us]
  - clusterGroup: canaries
  - clusterName: local
  - clusterGroupSelector:
      matchLabels:
        tier: edge
`

// restrictionYAML is a GitRepoRestriction as Fleet's users write them:
// fields at the top level.
const restrictionYAML = `
apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepoRestriction
metadata:
  name: platform
defaultServiceAccount: apps-deployer
allowedServiceAccounts: [apps-deployer, ops]
allowedRepoPatterns:
- https://git\.example\.com/platform/.*
defaultClientSecretName: git-auth
allowedClientSecretNames: [git-auth]
allowedTargetNamespaces: [apps, web]
allowedTargetNamespaceSelector:
  matchLabels:
    team: platform
`

func object(t *testing.T, doc, namespace string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(namespace)
	return u
}

// TestGitRepo_FleetManifestAcceptedStrictlyAndReadBack: a GitRepo and a
// GitRepoRestriction with every field Fleet's users write are created under
// strict field validation (no field dropped, none unknown) and read back
// with their values; a typo is refused as an unknown field, so strict
// validation was really on.
func TestGitRepo_FleetManifestAcceptedStrictlyAndReadBack(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "gitrepo-accept-")
	if err := c.Create(t.Context(), object(t, gitRepoYAML, ns), strict); err != nil {
		t.Fatalf("a GitRepo as Fleet's users write it, created with strict field validation: %v", err)
	}
	if err := c.Create(t.Context(), object(t, restrictionYAML, ns), strict); err != nil {
		t.Fatalf("a GitRepoRestriction as Fleet's users write it, created with strict field validation: %v", err)
	}

	repo := &fleet.GitRepo{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "apps"}, repo); err != nil {
		t.Fatal(err)
	}
	s := repo.Spec
	for what, ok := range map[string]bool{
		"pollingInterval 1m30s":      s.PollingInterval != nil && s.PollingInterval.Duration == 90*time.Second,
		"caBundle decoded":           string(s.CABundle) == "-----BEGIN CERTIFICATE-----\n",
		"paths":                      strings.Join(s.Paths, ",") == "web,charts/*",
		"four targets":               len(s.Targets) == 4 && s.Targets[0].ClusterSelector.MatchExpressions[0].Values[1] == "us" && s.Targets[1].ClusterGroup == "canaries",
		"correctDrift":               s.CorrectDrift != nil && s.CorrectDrift.Enabled && s.CorrectDrift.KeepFailHistory,
		"helmRepoURLRegex":           s.HelmRepoURLRegex == `https://charts\.example\.com/.*`,
		"forceSyncGeneration":        s.ForceSyncGeneration == 2,
		"driven scan bundles":        len(s.Bundles) == 1 && s.Bundles[0].Options == "fleet.yaml",
		"image scan (accepted only)": s.ImageScanCommit != nil && s.ImageScanCommit.AuthorName == "fleet" && s.ImageSyncInterval.Duration == 5*time.Minute,
	} {
		if !ok {
			t.Errorf("read back: %s: got %+v", what, s)
		}
	}
	r := &fleet.GitRepoRestriction{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "platform"}, r); err != nil {
		t.Fatal(err)
	}
	if r.DefaultServiceAccount != "apps-deployer" || len(r.AllowedRepoPatterns) != 1 || r.AllowedTargetNamespaceSelector.MatchLabels["team"] != "platform" {
		t.Errorf("GitRepoRestriction read back: %+v", r)
	}

	typo := object(t, gitRepoYAML, ns)
	typo.SetName("typo")
	if err := unstructured.SetNestedField(typo.Object, "1m", "spec", "pollingIntervall"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), typo, strict); err == nil || !strings.Contains(err.Error(), `unknown field "spec.pollingIntervall"`) {
		t.Errorf("a GitRepo with a misspelt field, under strict validation: %v; want unknown field", err)
	}
	typoR := object(t, restrictionYAML, ns)
	typoR.SetName("typo")
	typoR.Object["allowedRepoPattern"] = []any{".*"}
	if err := c.Create(t.Context(), typoR, strict); err == nil || !strings.Contains(err.Error(), `unknown field "allowedRepoPattern"`) {
		t.Errorf("a GitRepoRestriction with a misspelt field (which would allow every repository if dropped), under strict validation: %v; want unknown field", err)
	}
}

// TestGitRepo_CRDRefusesBadValues: values the source component could not
// use are refused by the API server, with a message that says what to
// write: a pollingInterval that is not a Go duration (days, no unit, a
// sign, words, empty, too long), a missing or empty repo, an invalid
// serviceAccount name. The durations Go and Fleet accept are accepted.
func TestGitRepo_CRDRefusesBadValues(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "gitrepo-refuse-")
	n := 0
	create := func(mod func(spec map[string]any)) error {
		n++
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "GitRepo",
			"metadata": map[string]any{"name": fmt.Sprintf("r%d", n), "namespace": ns},
			"spec":     map[string]any{"repo": "https://git.example.com/apps.git"},
		}}
		mod(u.Object["spec"].(map[string]any))
		return c.Create(t.Context(), u, strict)
	}
	durationMessage := "pollingInterval must be a Go duration such as 15s, 5m or 1h30m"
	for _, bad := range []string{"1d", "2w", "15", "-1s", "+15s", "five minutes", "15 s", "1h 30m", ".5s"} {
		err := create(func(s map[string]any) { s["pollingInterval"] = bad })
		if bad == "1d" {
			t.Logf("pollingInterval 1d: %v", err)
		}
		if err == nil || !strings.Contains(err.Error(), durationMessage) || !strings.Contains(err.Error(), "spec.pollingInterval") {
			t.Errorf("pollingInterval %q: %v; want refused with %q", bad, err, durationMessage)
		}
	}
	if err := create(func(s map[string]any) { s["pollingInterval"] = "" }); err == nil || !strings.Contains(err.Error(), "spec.pollingInterval") {
		t.Errorf("an empty pollingInterval: %v; want refused", err)
	}
	if err := create(func(s map[string]any) { s["pollingInterval"] = strings.Repeat("1", 40) + "s" }); err == nil || !strings.Contains(err.Error(), "spec.pollingInterval") {
		t.Errorf("a pollingInterval of 41 characters: %v; want refused", err)
	}
	if err := create(func(s map[string]any) { s["imageScanInterval"] = "1d" }); err == nil || !strings.Contains(err.Error(), "imageScanInterval must be a Go duration") {
		t.Errorf("imageScanInterval 1d: %v; want refused", err)
	}
	for _, good := range []string{"0", "15s", "1h30m", "1.5h", "500ms", "2562047h"} {
		if err := create(func(s map[string]any) { s["pollingInterval"] = good }); err != nil {
			t.Errorf("pollingInterval %q refused: %v", good, err)
		}
	}

	if err := create(func(s map[string]any) { delete(s, "repo") }); err == nil || !strings.Contains(err.Error(), "spec.repo: Required value") {
		t.Errorf("a GitRepo without repo: %v; want spec.repo required", err)
	}
	if err := create(func(s map[string]any) { s["repo"] = "" }); err == nil || !strings.Contains(err.Error(), "spec.repo") {
		t.Errorf("a GitRepo with an empty repo: %v; want refused", err)
	}
	if err := create(func(s map[string]any) { s["serviceAccount"] = "Apps_Deployer" }); err == nil || !strings.Contains(err.Error(), "spec.serviceAccount") {
		t.Errorf("serviceAccount Apps_Deployer: %v; want refused", err)
	}
}

// TestGitRepo_ComputedStatusAcceptedAndColumns: the status gitops/status
// computes is accepted by the API server's validation of the status
// subresource, for a GitRepo on 1,100 clusters with 1,110 resources (the
// bounded lists fit etcd's request limit), and `kubectl get gitrepos` shows
// Fleet's columns (Repo, Commit, BundleDeployments-Ready, Status) from it.
func TestGitRepo_ComputedStatusAcceptedAndColumns(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "gitrepo-status-")
	if err := c.Create(t.Context(), object(t, gitRepoYAML, ns), strict); err != nil {
		t.Fatal(err)
	}
	repo := &fleet.GitRepo{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "apps"}, repo); err != nil {
		t.Fatal(err)
	}

	const clusters = 1100
	b := fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apps-web", Labels: map[string]string{fleet.RepoLabel: "apps"}},
		Status: fleet.BundleStatus{Conditions: []metav1.Condition{
			{Type: fleet.ReadyCondition, Status: metav1.ConditionTrue, Reason: fleet.SucceededReason},
		}},
	}
	bds := make([]fleet.BundleDeployment, clusters)
	for i := range bds {
		cluster := fmt.Sprintf("a-rather-long-cluster-name-of-some-region-%04d", i)
		bds[i] = fleet.BundleDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-" + cluster, Name: "apps-web", Labels: map[string]string{
				fleet.RepoLabel: "apps", fleet.BundleLabel: "apps-web", fleet.BundleNamespaceLabel: ns,
				fleet.ClusterLabel: cluster, fleet.ClusterNamespaceLabel: ns,
			}},
			Spec: fleet.BundleDeploymentSpec{DeploymentID: "d1"},
			Status: fleet.BundleDeploymentStatus{
				AppliedDeploymentID: "d1", NonModified: true, Ready: i%10 != 0,
				Resources: []fleet.BundleDeploymentResource{
					{Kind: "ConfigMap", APIVersion: "v1", Namespace: "apps", Name: "settings"},
					{Kind: "ConfigMap", APIVersion: "v1", Namespace: "apps", Name: fmt.Sprintf("own-%04d", i)},
				},
				ResourceCounts: fleet.ResourceCounts{Ready: 2, DesiredReady: 2},
			},
		}
		if i%10 == 0 {
			bds[i].Status.NonReadyStatus = []fleet.NonReadyStatus{{Kind: "ConfigMap", APIVersion: "v1", Namespace: "apps", Name: fmt.Sprintf("own-%04d", i),
				Summary: fleet.SummaryOf("InProgress", strings.Repeat("waiting ", 200))}}
		}
	}
	repo.Status.Commit = "0123456789abcdef0123456789abcdef01234567"
	st := status.Compute(repo, status.Observed{Bundles: []fleet.Bundle{b}, BundleDeployments: bds}, time.Now())
	repo.Status = st
	size, _ := json.Marshal(repo.Status)
	if err := c.Status().Update(t.Context(), repo, strict); err != nil {
		t.Fatalf("the computed status (%d bytes of JSON) written to the status subresource: %v", len(size), err)
	}
	t.Logf("status of %d clusters written: %d bytes of JSON", clusters, len(size))

	// kubectl get gitrepos: the server-side table.
	raw, err := env.Upstream.Clientset.CoreV1().RESTClient().Get().
		AbsPath("/apis/fleet.cattle.io/v1alpha1/namespaces", ns, "gitrepos").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range table.ColumnDefinitions {
		names = append(names, col.Name)
	}
	if got, want := strings.Join(names, ","), "Name,Repo,Commit,BundleDeployments-Ready,Status"; got != want {
		t.Errorf("kubectl get gitrepos columns %s, want %s (Fleet's)", got, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	cells := fmt.Sprint(table.Rows[0].Cells)
	for _, want := range []string{"https://git.example.com/platform/apps.git", repo.Status.Commit, "990/1100", "NotReady(110)"} {
		if !strings.Contains(cells, want) {
			t.Errorf("the row %s does not show %q", cells, want)
		}
	}
}

// TestGitRepoRestriction_FromTheAPIServerRefuses: restrictions as the API
// server returns them (two in the namespace, one in another) refuse a
// GitRepo outside their patterns, service accounts and target namespaces
// through gitops/restriction, and accept one within them with the
// defaults filled in; the other namespace's restriction does not count.
func TestGitRepoRestriction_FromTheAPIServerRefuses(t *testing.T) {
	c := env.Upstream.Client
	ns := testenv.Namespace(t, c, "gitrepo-restrict-")
	other := testenv.Namespace(t, c, "gitrepo-restrict-other-")
	if err := c.Create(t.Context(), object(t, restrictionYAML, ns), strict); err != nil {
		t.Fatal(err)
	}
	second := object(t, `
apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepoRestriction
metadata:
  name: ops
allowedRepoPatterns: ["https://git\\.example\\.com/ops/.*"]
`, ns)
	if err := c.Create(t.Context(), second, strict); err != nil {
		t.Fatal(err)
	}
	elsewhere := object(t, `
apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepoRestriction
metadata:
  name: anything
allowedRepoPatterns: [".*"]
allowedServiceAccounts: [cluster-admin]
`, other)
	if err := c.Create(t.Context(), elsewhere, strict); err != nil {
		t.Fatal(err)
	}
	var all fleet.GitRepoRestrictionList
	if err := c.List(t.Context(), &all); err != nil {
		t.Fatal(err)
	}

	ok := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"},
		Spec: fleet.GitRepoSpec{Repo: "https://git.example.com/ops/tools.git", TargetNamespace: "web"}}
	eff, err := restriction.Evaluate(ok, all.Items, restriction.Options{})
	if err != nil {
		t.Fatalf("a GitRepo within the restrictions: %v", err)
	}
	if eff.ServiceAccount != "apps-deployer" || eff.ClientSecretName != "git-auth" || eff.AllowedTargetNamespaceSelector == nil {
		t.Errorf("effective settings %+v: want the defaults and the selector of restriction platform", eff)
	}

	bad := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
		Spec: fleet.GitRepoSpec{Repo: "https://github.com/someone/else.git", ServiceAccount: "cluster-admin", TargetNamespace: "kube-system"}}
	_, err = restriction.Evaluate(bad, all.Items, restriction.Options{})
	for _, want := range []string{"spec.targetNamespace \"kube-system\"", "spec.serviceAccount \"cluster-admin\"", "spec.repo \"https://github.com/someone/else.git\"", "GitRepoRestrictions ops, platform"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v does not say %s", err, want)
		}
	}
}
