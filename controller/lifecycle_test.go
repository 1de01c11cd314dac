package controller_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bundle"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/renderer"
)

// The controller, as exactly the identity charts/fleet gives it, copies a
// Bundle's downstreamResources (a Secret and a ConfigMap of its own
// namespace) into each target's content and nowhere else, renders again
// when the Secret changes, and refuses a credential of the upstream.
func TestBundle_DownstreamResourcesAreCopiedIntoTheContentOnly(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-copies-")
	newCluster(t, ws, "prod-1", map[string]string{"env": "prod"})
	password := "pw-" + ws
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "creds"}, StringData: map[string]string{"password": password}}
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "settings"}, Data: map[string]string{"color": "blue"}}
	for _, o := range []client.Object{src, cfg} {
		if err := up.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "app", IgnoreOptions: &fleet.IgnoreOptions{}, CorrectDrift: &fleet.CorrectDrift{},
				DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "creds"}}},
			Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"}},
			Targets: []fleet.BundleTarget{{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				BundleDeploymentOptions: fleet.BundleDeploymentOptions{DownstreamResources: []fleet.DownstreamResource{{Kind: "configmap", Name: "settings"}}}}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	got := content(t, ws, "prod-1", "app")
	for _, want := range []string{`"kind":"Secret"`, `"name":"creds"`, b64(password), `"kind":"ConfigMap"`, `"color":"blue"`} {
		if !strings.Contains(got, want) {
			t.Errorf("content lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"namespace"`) || strings.Contains(got, "ownerReferences") {
		t.Errorf("copies must carry no namespace or upstream metadata:\n%s", got)
	}

	src.StringData = map[string]string{"password": password + "-2"}
	if err := up.Update(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "changed Secret in the content", func() error {
		if c := content(t, ws, "prod-1", "app"); !strings.Contains(c, b64(password+"-2")) {
			return fmt.Errorf("old copy")
		}
		return nil
	})
	bd := &fleet.BundleDeployment{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: names.ClusterNamespace(ws, "prod-1"), Name: "app"}, bd); err != nil {
		t.Fatal(err)
	}
	bundleNow := &fleet.Bundle{}
	if err := up.Get(t.Context(), client.ObjectKeyFromObject(b), bundleNow); err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{bd, bundleNow.Status} {
		raw, _ := json.Marshal(o)
		for _, secret := range []string{password, b64(password), password + "-2", b64(password + "-2")} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("%T holds the Secret's data", o)
			}
		}
	}

	// A service-account token Secret of the workspace is never copied.
	tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "sa-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	if err := up.Create(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	thief := b.DeepCopy()
	thief.ObjectMeta = metav1.ObjectMeta{Namespace: ws, Name: "thief"}
	thief.Spec.DownstreamResources = []fleet.DownstreamResource{{Kind: "Secret", Name: "sa-token"}}
	if err := up.Create(t.Context(), thief); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "token copy refused", func() error {
		got := &fleet.Bundle{}
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(thief), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ReadyCondition)
		if c == nil || c.Reason != bundle.DownstreamResourceInvalidReason || !strings.Contains(c.Message, "sa-token") || !strings.Contains(c.Message, "never copied") {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		return nil
	})
	if deployed := deployedTo(t, ws, "thief"); len(deployed) != 0 {
		t.Errorf("a refused Bundle must not be deployed: %v", deployed)
	}

	// Nor is the age key the source component decrypts the workspace's
	// SOPS files with (a data key ending in .agekey).
	ageKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "sops-age"}, StringData: map[string]string{"identity.agekey": "AGE-SECRET-KEY-1NOTAREALKEY"}}
	if err := up.Create(t.Context(), ageKey); err != nil {
		t.Fatal(err)
	}
	keyThief := b.DeepCopy()
	keyThief.ObjectMeta = metav1.ObjectMeta{Namespace: ws, Name: "key-thief"}
	keyThief.Spec.DownstreamResources = []fleet.DownstreamResource{{Kind: "Secret", Name: "sops-age"}}
	if err := up.Create(t.Context(), keyThief); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "age key copy refused", func() error {
		got := &fleet.Bundle{}
		if err := up.Get(t.Context(), client.ObjectKeyFromObject(keyThief), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, fleet.ReadyCondition)
		if c == nil || c.Reason != bundle.DownstreamResourceInvalidReason || !strings.Contains(c.Message, "sops-age") || !strings.Contains(c.Message, "SOPS decryption key") {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		if strings.Contains(c.Message, "AGE-SECRET-KEY") {
			return fmt.Errorf("the condition shows the key: %s", c.Message)
		}
		return nil
	})
	if deployed := deployedTo(t, ws, "key-thief"); len(deployed) != 0 {
		t.Errorf("a refused Bundle must not be deployed: %v", deployed)
	}
}

// AllMatches and targetRestrictions: the controller deploys exactly what
// fleet render bundle shows, to exactly the clusters the restrictions allow.
func TestBundle_AllMatchesWithinRestrictionsDeploysWhatRenderShows(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-allmatches-")
	clusters := map[string]*fleet.Cluster{
		"eu-prod": newCluster(t, ws, "eu-prod", map[string]string{"env": "prod", "region": "eu"}),
		"us-prod": newCluster(t, ws, "us-prod", map[string]string{"env": "prod", "region": "us"}),
		"eu-dev":  newCluster(t, ws, "eu-dev", map[string]string{"env": "dev", "region": "eu"}),
	}
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "app"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "app", IgnoreOptions: &fleet.IgnoreOptions{}},
			TargetCustomizationMode: fleet.TargetCustomizationModeAllMatches,
			Resources: []fleet.BundleResource{
				{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  tier: base\n"},
				{Name: "overlays/prod/cm_patch.yaml", Content: "data:\n  tier: prod\n"},
				{Name: "overlays/eu/cm_patch.yaml", Content: "data:\n  region: eu\n"},
			},
			Targets: []fleet.BundleTarget{
				{Name: "prod", ClusterSelector: sel("env", "prod"), BundleDeploymentOptions: fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"prod"}}}},
				{Name: "eu", ClusterSelector: sel("region", "eu"), BundleDeploymentOptions: fleet.BundleDeploymentOptions{YAML: &fleet.YAMLOptions{Overlays: []string{"eu"}}}},
			},
			// The GitRepo's targets allow production clusters only.
			TargetRestrictions: []fleet.BundleTargetRestriction{{Name: "prod", ClusterSelector: sel("env", "prod")}},
		},
	}
	if err := up.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	waitDeployedTo(t, ws, "app", "eu-prod", "us-prod")
	for name, want := range map[string][]string{"eu-prod": {`"tier":"prod"`, `"region":"eu"`}, "us-prod": {`"tier":"prod"`}} {
		got := content(t, ws, name, "app")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: content lacks %s:\n%s", name, w, got)
			}
		}
		out, err := renderer.RenderBundle(b, clusters[name], nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(out.YAML) != got {
			t.Errorf("%s: fleet render bundle shows\n%s\nthe controller deployed\n%s", name, out.YAML, got)
		}
	}
	if _, err := renderer.RenderBundle(b, clusters["eu-dev"], nil); err == nil || !strings.Contains(err.Error(), "targetRestrictions") {
		t.Errorf("render for a restricted cluster: %v", err)
	}
}
