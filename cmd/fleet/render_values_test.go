package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/valuessecret"
	"github.com/gitops-fleet/fleet/renderer"
)

// TestRenderBundle_ValuesPerClusterAndValuesFromTheUpstream: `fleet render
// bundle --cluster` templates the values with that Cluster and reads
// valuesFrom from the upstream it is pointed at (--kubeconfig), exactly as
// the controller renders (renderer.RenderBundleWith, which the controller's
// envtest compares with what it deploys); without an upstream it says it
// needs one; another namespace is refused as by the controller.
func TestRenderBundle_ValuesPerClusterAndValuesFromTheUpstream(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	up := env.Upstream.Client
	ws := testenv.Namespace(t, up, "fleet-render-values-")
	other := testenv.Namespace(t, up, "fleet-render-values-other-")
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "db"}, Data: map[string][]byte{"values.yaml": []byte("password: from-upstream\n")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "db"}, Data: map[string][]byte{"values.yaml": []byte("password: other-workspace\n")}},
	} {
		if err := up.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	write := func(name string, obj any) string {
		data, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.WriteFile(kc, env.Upstream.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{TypeMeta: metav1.TypeMeta{APIVersion: "fleet.cattle.io/v1alpha1", Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "eu-1", Labels: map[string]string{"tier": "gold"}}}
	bundle := func(name, valuesFromNamespace string) *fleet.Bundle {
		return &fleet.Bundle{TypeMeta: metav1.TypeMeta{APIVersion: "fleet.cattle.io/v1alpha1", Kind: "Bundle"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
			Spec: fleet.BundleSpec{
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart",
					Values:     &fleet.GenericMap{Data: map[string]any{"tier": "${ .ClusterLabels.tier }-${ .ClusterName }"}},
					ValuesFrom: []fleet.ValuesFrom{{SecretKeyRef: &fleet.SecretKeySelector{LocalObjectReference: fleet.LocalObjectReference{Name: "db"}, Namespace: valuesFromNamespace}}}}},
				Resources: []fleet.BundleResource{
					{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: show\nversion: 0.1.0\n"},
					{Name: "chart/templates/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: show\ndata:\n  tier: {{ .Values.tier }}\n  password: {{ .Values.password }}\n"},
				},
				Targets: []fleet.BundleTarget{{ClusterSelector: &metav1.LabelSelector{}}},
			}}
	}
	b := bundle("db", "")
	bundleFile, clusterFile := write("bundle.yaml", b), write("cluster.yaml", cluster)

	if _, err := runCLI(t, "render", "bundle", "--bundle", bundleFile, "--cluster", clusterFile); err == nil ||
		!strings.Contains(err.Error(), "helm.valuesFrom reads Secret "+ws+"/db from the upstream cluster") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("without an upstream: %v, want an error saying valuesFrom needs --kubeconfig", err)
	}

	got, err := runCLI(t, "render", "bundle", "--bundle", bundleFile, "--cluster", clusterFile, "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "tier: gold-eu-1") || !strings.Contains(string(got), "password: from-upstream") {
		t.Errorf("printed\n%s\nwant the cluster's tier and the upstream Secret's password", got)
	}
	want, err := renderer.RenderBundleWith(b, cluster, nil, []renderer.ValuesSource{{Kind: "Secret", Namespace: ws, Name: "db", Key: "values.yaml", Data: []byte("password: from-upstream\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want.YAML) {
		t.Errorf("printed\n%s\nthe controller's renderer renders\n%s", got, want.YAML)
	}

	steal := write("steal.yaml", bundle("steal", other))
	if _, err := runCLI(t, "render", "bundle", "--bundle", steal, "--cluster", clusterFile, "--kubeconfig", kc); err == nil ||
		!strings.Contains(err.Error(), fleet.ValuesFromNotAllowedReason) || strings.Contains(err.Error(), "other-workspace") {
		t.Errorf("another namespace: %v, want %s", err, fleet.ValuesFromNotAllowedReason)
	}
}

// TestRenderBundle_ValuesHashFromTheFileOrTheUpstream: a Bundle as Fleet's
// fleet apply writes it to a cluster (spec.valuesHash, its values in the
// Secret named like it) renders with the values of that Secret, read from
// the Bundle's file (stringData as the API server stores it) or from the
// upstream; without either, or with other values than the hash names, it
// says so, naming the Secret.
func TestRenderBundle_ValuesHashFromTheFileOrTheUpstream(t *testing.T) {
	env := testenv.SharedControlPlanes(t, controlplane.Options{})
	up := env.Upstream.Client
	ws := testenv.Namespace(t, up, "fleet-render-valueshash-")
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, env.Upstream.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	upstreamData := map[string][]byte{"values.yaml": []byte(`{"password":"from-upstream"}`)}
	if err := up.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}, Type: valuessecret.Type, Data: upstreamData}); err != nil {
		t.Fatal(err)
	}
	bundle := func(hash string) *fleet.Bundle {
		return &fleet.Bundle{TypeMeta: metav1.TypeMeta{APIVersion: "fleet.cattle.io/v1alpha1", Kind: "Bundle"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"},
			Spec: fleet.BundleSpec{
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{Helm: &fleet.HelmOptions{Chart: "chart"}},
				ValuesHash:              hash,
				Resources: []fleet.BundleResource{
					{Name: "chart/Chart.yaml", Content: "apiVersion: v2\nname: show\nversion: 0.1.0\n"},
					{Name: "chart/templates/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: show\ndata:\n  password: {{ .Values.password }}\n"},
				},
			}}
	}
	write := func(name string, objs ...any) string {
		var docs []string
		for _, o := range objs {
			data, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(data))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	alone := write("alone.yaml", bundle(valuessecret.Hash(upstreamData)))
	if _, err := runCLI(t, "render", "bundle", "--bundle", alone); err == nil ||
		!strings.Contains(err.Error(), "spec.valuesHash: its Helm values are in Secret "+ws+"/app") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("without the Secret: %v, want an error naming the Secret and --kubeconfig", err)
	}
	got, err := runCLI(t, "render", "bundle", "--bundle", alone, "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "password: from-upstream") {
		t.Errorf("printed\n%s\nwant the upstream Secret's password", got)
	}

	// In the file, written with stringData: the hash is of the data the
	// API server would store.
	fileSecret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"}, Type: valuessecret.Type,
		StringData: map[string]string{"values.yaml": `{"password":"from-file"}`}}
	inFile := write("infile.yaml", fileSecret, bundle(valuessecret.Hash(map[string][]byte{"values.yaml": []byte(`{"password":"from-file"}`)})))
	got, err = runCLI(t, "render", "bundle", "--bundle", inFile, "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "password: from-file") {
		t.Errorf("printed\n%s\nwant the file's Secret's password", got)
	}

	stale := write("stale.yaml", fileSecret, bundle(valuessecret.Hash(upstreamData)))
	if _, err := runCLI(t, "render", "bundle", "--bundle", stale); err == nil ||
		!strings.Contains(err.Error(), fleet.WaitingForValuesReason) || strings.Contains(err.Error(), "from-file") {
		t.Errorf("other values than the hash names: %v, want %s without the values", err, fleet.WaitingForValuesReason)
	}
}
