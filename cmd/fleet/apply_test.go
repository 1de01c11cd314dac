package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
)

// applyFixtures is the checkout the bundlereader tests read.
const applyFixtures = "../../gitops/bundlereader/testdata/repo"

// splitDocs splits multi-document YAML.
func splitDocs(data []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// copyTree copies the directories dirs of the fixture checkout into a new
// checkout, to change it between runs.
func copyTree(t *testing.T, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range dirs {
		cmd := exec.Command("cp", "-r", filepath.Join(applyFixtures, d), filepath.Join(root, d))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
	}
	return root
}

// TestApply_OfflineBundlesAreAcceptedStrictlyAndRender: `fleet apply -o`
// writes the fixture checkout's Bundles (the bad fleet.yaml and the chart
// from a repository named on stderr, exit 1, the others written); the
// real API server accepts every one with strict field validation, and
// `fleet render bundle` renders them as the fleet.yaml files mean:
// values files over inline values, a target customisation's values, a
// yaml overlay, a kustomize overlay, nested fleet.yaml directories left
// out of plain manifests.
func TestApply_OfflineBundlesAreAcceptedStrictlyAndRender(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	c := client.WithFieldValidation(env.Upstream.Client, client.FieldValidation(metav1.FieldValidationStrict))
	ws := testenv.Namespace(t, env.Upstream.Client, "fleet-apply-offline-")
	dir := t.TempDir()
	out := filepath.Join(dir, "bundles.yaml")

	code, stdout, stderr := runMain(t, "apply", "-o", out, "--root", applyFixtures, "-n", ws, "--commit", "abc123", "test", "*")
	if code != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q: want 1 (two paths fail), nothing on stdout", code, stdout)
	}
	for _, want := range []string{`path bad: bad/fleet.yaml:4: unknown field "helm.chrt", did you mean "chart"?`, "path remote: remote/fleet.yaml:", "2 of 13 paths failed (bad, remote)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, doc := range splitDocs(data) {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(t.Context(), obj); err != nil {
			t.Errorf("the API server refuses Bundle %s: %v", obj.GetName(), err)
		}
		if obj.GetLabels()[fleet.RepoLabel] != "test" || obj.GetLabels()[fleet.CommitLabel] != "abc123" {
			t.Errorf("Bundle %s labels %v", obj.GetName(), obj.GetLabels())
		}
		files[obj.GetName()] = writeFile(t, dir, obj.GetName()+".yaml", string(doc))
	}
	if len(files) != 11 {
		t.Errorf("%d Bundles written, want 11", len(files))
	}
	cluster := writeFile(t, dir, "cluster.yaml", "apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: dev-1\n  namespace: "+ws+"\n  labels:\n    env: dev\nspec: {}\n")
	for _, tt := range []struct {
		bundle      string
		withCluster bool
		want, not   []string
	}{
		{"test-helm", false, []string{"name: local-chart", `color: "green"`, `keep: "inline"`, `over: "file"`}, nil},
		{"test-tc", true, []string{"name: tc", `replicas: "2"`}, nil},
		{"test-overlays", true, []string{`"name":"overlaid"`, `"env":"dev"`}, []string{`"env":"all"`}},
		{"test-kustomize", false, []string{"name: dev-kustomized", "env: base"}, nil},
		{"test-simple", false, []string{"name: simple", "greeting: hello"}, nil},
		{"test-nested", false, []string{"name: nested-top", "name: nested-plain"}, []string{"nested-app", "nested-child"}},
		{"test-nested-app", false, []string{"name: nested-app"}, []string{"nested-child"}},
		{"my-bundle", false, []string{"name: named"}, nil},
	} {
		args := []string{"render", "bundle", "--bundle", files[tt.bundle]}
		if tt.withCluster {
			args = append(args, "--cluster", cluster)
		}
		got, err := runCLI(t, args...)
		if err != nil {
			t.Errorf("render %s: %v", tt.bundle, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("render %s lacks %q:\n%s", tt.bundle, w, got)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(string(got), n) {
				t.Errorf("render %s has %q:\n%s", tt.bundle, n, got)
			}
		}
	}
}

// TestApply_ToTheClusterPrunesOnlyAfterACompleteRead runs fleet apply
// against a real API server as a GitRepo's checkout changes: Bundles are
// created, then unchanged; a fleet.yaml naming another GitRepo's Bundle is
// refused and that Bundle left as it was; a bad fleet.yaml fails its path
// and keeps the Bundle of a removed directory (an incomplete read prunes
// nothing); once fixed, the removed directory's Bundle is pruned, and the
// other GitRepo's Bundles are never touched.
func TestApply_ToTheClusterPrunesOnlyAfterACompleteRead(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	c := env.Upstream.Client
	ws := testenv.Namespace(t, c, "fleet-apply-")
	kc := writeFile(t, t.TempDir(), "kubeconfig", string(env.Upstream.Kubeconfig))
	root := copyTree(t, "simple", "named", "helm")
	apply := func(wantCode int, wantOut, wantErr []string) {
		t.Helper()
		code, stdout, stderr := runMain(t, "apply", "--kubeconfig", kc, "-n", ws, "--root", root, "--commit", "c1", "test", "*")
		if code != wantCode {
			t.Errorf("exit %d, want %d; stdout %q stderr %q", code, wantCode, stdout, stderr)
		}
		for _, w := range wantOut {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
		for _, w := range wantErr {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
	}
	names := func() []string {
		t.Helper()
		list := &fleet.BundleList{}
		if err := c.List(t.Context(), list, client.InNamespace(ws)); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range list.Items {
			out = append(out, b.Name)
		}
		slices.Sort(out)
		return out
	}

	other := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "theirs", Labels: map[string]string{fleet.RepoLabel: "other"}},
		Spec: fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "kind: ConfigMap"}}}}
	if err := c.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	apply(0, []string{"Bundle " + ws + "/test-simple created", "Bundle " + ws + "/my-bundle created", "Bundle " + ws + "/test-helm created"}, nil)
	if got, want := names(), []string{"my-bundle", "test-helm", "test-simple", "theirs"}; !slices.Equal(got, want) {
		t.Fatalf("Bundles %v, want %v", got, want)
	}
	b := &fleet.Bundle{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "test-helm"}, b); err != nil {
		t.Fatal(err)
	}
	if b.Labels[fleet.CommitLabel] != "c1" || b.Spec.Helm == nil || b.Spec.Helm.Values.Data["color"] != "green" {
		t.Errorf("test-helm as written: labels %v helm %+v", b.Labels, b.Spec.Helm)
	}
	apply(0, []string{"Bundle " + ws + "/test-simple unchanged"}, nil)

	// A fleet.yaml naming another GitRepo's Bundle.
	writeFile(t, root, "steal/fleet.yaml", "name: theirs\n")
	writeFile(t, root, "steal/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n")
	apply(1, nil, []string{`path steal: Bundle ` + ws + `/theirs: `, `a Bundle of this name belongs to GitRepo "other"; not overwritten`})
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: "theirs"}, b); err != nil || b.Labels[fleet.RepoLabel] != "other" || b.Spec.Resources[0].Content != "kind: ConfigMap" {
		t.Errorf("the other GitRepo's Bundle changed: %v %+v", err, b)
	}
	if err := os.RemoveAll(filepath.Join(root, "steal")); err != nil {
		t.Fatal(err)
	}

	// A directory removed while another path's fleet.yaml is bad.
	if err := os.RemoveAll(filepath.Join(root, "simple")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "broken/fleet.yaml", "namespace: x\nhelm:\n  chrt: y\n")
	writeFile(t, root, "broken/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n")
	apply(1, []string{"not pruned, since not every path was read and written: Bundle " + ws + "/test-simple kept"},
		[]string{`path broken: broken/fleet.yaml:3: unknown field "helm.chrt"`, "1 of 3 paths failed (broken)"})
	if got, want := names(), []string{"my-bundle", "test-helm", "test-simple", "theirs"}; !slices.Equal(got, want) {
		t.Errorf("after an incomplete read: Bundles %v, want %v", got, want)
	}

	writeFile(t, root, "broken/fleet.yaml", "namespace: x\n")
	apply(0, []string{"Bundle " + ws + "/test-broken created", "Bundle " + ws + "/test-simple pruned (no longer in the checkout)"}, nil)
	if got, want := names(), []string{"my-bundle", "test-broken", "test-helm", "theirs"}; !slices.Equal(got, want) {
		t.Errorf("after a complete read: Bundles %v, want %v", got, want)
	}
}

// TestApply_UsageAndInputErrors: no NAME is a usage error (2); a targets
// file with a misspelt field names it (1).
func TestApply_UsageAndInputErrors(t *testing.T) {
	code, _, stderr := runMain(t, "apply", "-o", "-")
	if code != 2 || !strings.Contains(stderr, "requires at least 1 arg(s)") {
		t.Errorf("no NAME: exit %d, stderr %q", code, stderr)
	}
	tf := writeFile(t, t.TempDir(), "targets.yaml", "targets:\n- name: a\n  clusterSelecter: {}\n")
	code, _, stderr = runMain(t, "apply", "-o", "-", "--targets-file", tf, "--root", applyFixtures, "test", "simple")
	if code != 1 || !strings.Contains(stderr, `targets.yaml:3: unknown field "targets[0].clusterSelecter", did you mean "clusterSelector"?`) {
		t.Errorf("bad targets file: exit %d, stderr %q", code, stderr)
	}
	// GitRepo options reach the output.
	code, stdout, stderr := runMain(t, "apply", "-o", "-", "--root", applyFixtures, "--service-account", "deployer", "--target-namespace", "tn", "--paused", "--sync-generation", "4", "--keep-resources", "--delete-namespace", "--correct-drift", "--correct-drift-force", "-l", "team=blue,tier=web", "test", "simple")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b := &fleet.Bundle{}
	if err := yaml.UnmarshalStrict([]byte(stdout), b); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	s := b.Spec
	if s.ServiceAccount != "deployer" || s.TargetNamespace != "tn" || !s.Paused || s.ForceSyncGeneration != 4 || !s.KeepResources || !s.DeleteNamespace || !s.CorrectDrift.Force || b.Labels["team"] != "blue" || b.Labels["tier"] != "web" || b.Namespace != "fleet-local" {
		t.Errorf("options not in the Bundle:\n%s", stdout)
	}
}

// TestApply_RunsAsTheCallerAndNoMore: fleet apply writes with the caller's
// own identity (a kubeconfig impersonating alice, who may write Bundles in
// one namespace only): there it applies; in another namespace the API
// server refuses, the command says so and exits 1, and nothing is written.
func TestApply_RunsAsTheCallerAndNoMore(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	c := env.Upstream.Client
	ws := testenv.Namespace(t, c, "fleet-apply-alice-")
	other := testenv.Namespace(t, c, "fleet-apply-other-")
	kc := bundleWriterKubeconfig(t, env, ws)

	code, stdout, stderr := runMain(t, "apply", "--kubeconfig", kc, "-n", ws, "--root", applyFixtures, "test", "simple")
	if code != 0 || !strings.Contains(stdout, "Bundle "+ws+"/test-simple created") {
		t.Errorf("in her namespace: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, _, stderr = runMain(t, "apply", "--kubeconfig", kc, "-n", other, "--root", applyFixtures, "test", "simple")
	if code != 1 || !strings.Contains(stderr, `User "alice" cannot`) {
		t.Errorf("in another namespace: exit %d, stderr %q; want 1 and the API server's refusal", code, stderr)
	}
	list := &fleet.BundleList{}
	if err := c.List(t.Context(), list, client.InNamespace(other)); err != nil || len(list.Items) != 0 {
		t.Errorf("Bundles in the namespace alice may not write: %d (%v)", len(list.Items), err)
	}
}

// bundleWriterKubeconfig lets user alice write Bundles in namespace ns (and
// nothing else) and returns a kubeconfig file of env's upstream that
// impersonates her.
func bundleWriterKubeconfig(t *testing.T, env *controlplane.Env, ns string) string {
	t.Helper()
	c := env.Upstream.Client
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle-writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"fleet.cattle.io"}, Resources: []string{"bundles"}, Verbs: []string{"get", "list", "create", "patch", "update", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "bundle-writer"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: "rbac.authorization.k8s.io"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.Load(env.Upstream.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = "alice"
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), "kubeconfig", string(data))
}
