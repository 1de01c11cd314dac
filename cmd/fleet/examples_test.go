package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/apply"
	"github.com/gitops-fleet/fleet/internal/bundlecontent"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/internal/scheme"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
	"github.com/gitops-fleet/fleet/internal/targeting"
	"github.com/gitops-fleet/fleet/renderer"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// The directory users copy into their git repository, and the controller
// config `fleet render agent --config` reads beside it.
const (
	gitopsDir    = "../../examples/gitops"
	gitopsConfig = gitopsDir + "/config/fleet-controller.yaml"
)

// gitopsObject is one object of the examples/gitops kustomize build, decoded
// strictly into its API type.
type gitopsObject struct {
	gvk schema.GroupVersionKind
	obj client.Object
}

// buildGitops builds examples/gitops as the dev demo and users do (kustomize
// API, plugins off, files under the root only) and decodes every object
// into its Go API type. Unknown, misspelt or duplicate fields fail, as does
// any kind the project's scheme does not know.
func buildGitops(t *testing.T) []gitopsObject {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = kustypes.DisabledPluginConfig()
	opts.LoadRestrictions = kustypes.LoadRestrictionsRootOnly
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), gitopsDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", gitopsDir, err)
	}
	var out []gitopsObject
	for _, res := range resMap.Resources() {
		data, err := res.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatal(err)
		}
		gvk := tm.GroupVersionKind()
		ro, err := scheme.Scheme.New(gvk)
		if err != nil {
			t.Fatalf("%s %s: not a kind of the Kubernetes or fleet.cattle.io API: %v", gvk, res.GetName(), err)
		}
		obj, ok := ro.(client.Object)
		if !ok {
			t.Fatalf("%s is not an object kind", gvk)
		}
		if err := strictyaml.Unmarshal(data, obj); err != nil {
			t.Fatalf("%s %s/%s does not decode strictly into its API type: %v", gvk.Kind, res.GetNamespace(), res.GetName(), err)
		}
		out = append(out, gitopsObject{gvk: gvk, obj: obj})
	}
	return out
}

// find returns the object of a kind and name, failing the test without one.
func find[T client.Object](t *testing.T, objs []gitopsObject, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.obj.(T); ok && o.obj.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("examples/gitops builds no %T named %q", zero, name)
	return zero
}

func TestGitopsExample_BuildsIntoStrictlyValidObjects(t *testing.T) {
	objs := buildGitops(t)

	var got []string
	for _, o := range objs {
		got = append(got, o.gvk.Kind+" "+o.obj.GetNamespace()+"/"+o.obj.GetName())
	}
	want := []string{
		"Bundle fleet-default/hello",
		"Bundle fleet-default/payments-view",
		"Cluster fleet-default/dev-1",
		"ClusterGroup fleet-default/dev",
		"ClusterRegistrationToken fleet-default/dev-token",
		"Namespace /fleet-default",
		"Role fleet-default/payments-dev-1-access",
		"RoleBinding fleet-default/payments-dev-1-access",
		"Secret fleet-default/dev-1-kubeconfig",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the root kustomization builds\n  %s\nwant\n  %s\n(clusters/more/ stays out: its clusters cannot become Ready in the demo)",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// Namespaces: cluster-scoped objects have none, every other object is
	// in the workspace and says so itself (no namespace transformer).
	// (Namespace is the only cluster-scoped kind of the set checked above.)
	for _, o := range objs {
		clusterScoped := o.gvk.GroupKind() == schema.GroupKind{Kind: "Namespace"}
		switch {
		case clusterScoped && o.obj.GetNamespace() != "":
			t.Errorf("cluster-scoped %s %s got namespace %q", o.gvk.Kind, o.obj.GetName(), o.obj.GetNamespace())
		case !clusterScoped && o.obj.GetNamespace() != "fleet-default":
			t.Errorf("%s %s is in namespace %q, want fleet-default", o.gvk.Kind, o.obj.GetName(), o.obj.GetNamespace())
		}
	}

	cluster := find[*fleet.Cluster](t, objs, "dev-1")
	if cluster.Labels["env"] != "dev" || cluster.Spec.KubeConfigSecret != "dev-1-kubeconfig" || cluster.Spec.ClientID != "dev-1" ||
		cluster.Spec.RedeployAgentGeneration != 1 || cluster.Spec.KubeConfigSecretNamespace != "" {
		t.Errorf("Cluster dev-1: labels %v, spec %+v", cluster.Labels, cluster.Spec)
	}
	secret := find[*corev1.Secret](t, objs, cluster.Spec.KubeConfigSecret)
	if secret.Namespace != cluster.Namespace || secret.Type != corev1.SecretTypeOpaque {
		t.Errorf("kubeconfig Secret %s/%s of type %q: want type Opaque in the Cluster's namespace %s", secret.Namespace, secret.Name, secret.Type, cluster.Namespace)
	}
	if kc := secret.StringData["value"]; !strings.Contains(kc, "PLACEHOLDER") || !strings.Contains(kc, "kind: Config") || len(secret.Data) != 0 || len(secret.StringData) != 1 {
		t.Errorf("kubeconfig Secret: want exactly key stringData.value holding a kubeconfig marked PLACEHOLDER, got data %v stringData %v", secret.Data, secret.StringData)
	}

	token := find[*fleet.ClusterRegistrationToken](t, objs, "dev-token")
	if token.Spec.TTL == nil || token.Spec.TTL.Duration != 24*time.Hour || token.Spec.ClientID != "" {
		t.Errorf("ClusterRegistrationToken dev-token: spec %+v, want ttl 24h and no clientID (it registers dev-2 and others)", token.Spec)
	}

	group := find[*fleet.ClusterGroup](t, objs, "dev")
	sel, err := metav1.LabelSelectorAsSelector(group.Spec.Selector)
	if err != nil || group.Spec.Selector == nil || !sel.Matches(labels.Set{"env": "dev"}) || sel.Matches(labels.Set{"env": "prod"}) {
		t.Errorf("ClusterGroup dev: selector %v (%v), want env=dev", group.Spec.Selector, err)
	}

	bundle := find[*fleet.Bundle](t, objs, "hello")
	for _, r := range bundle.Spec.Resources {
		if r.Encoding != "" {
			t.Errorf("Bundle hello resource %s has encoding %q: keep resources plain text so a pull request shows them", r.Name, r.Encoding)
		}
	}
	if len(bundle.Spec.Targets) == 0 || bundle.Spec.Targets[0].ClusterGroup != group.Name {
		t.Errorf("Bundle hello's first target must be ClusterGroup %s: %+v", group.Name, bundle.Spec.Targets)
	}
}

// controllerRender renders a Bundle for a cluster as the Bundle reconciler
// does: the first target that selects the cluster (by name, labels or a
// ClusterGroup of the build) lays its options over the Bundle's, then
// renderer.RenderFiles. It returns nil when no target selects the cluster.
func controllerRender(t *testing.T, b *fleet.Bundle, c *fleet.Cluster, groups []*fleet.ClusterGroup) *renderer.Output {
	t.Helper()
	// The controller's decision (controller/bundle): every group of the
	// workspace, the same targeting rule as fleet render bundle.
	opts, tg, err := renderer.OptionsFor(b, c, targeting.Groups{Items: derefGroups(groups)})
	if err != nil {
		t.Fatal(err)
	}
	if tg == nil || tg.DoNotDeploy {
		return nil
	}
	files, err := bundlefiles.Decode(b.Spec.Resources)
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.RenderFiles(b.Name, files, opts)
	if err != nil {
		t.Fatalf("Bundle %s does not render for cluster %s: %v", b.Name, c.Name, err)
	}
	return out
}

func derefGroups(groups []*fleet.ClusterGroup) []fleet.ClusterGroup {
	out := make([]fleet.ClusterGroup, len(groups))
	for i, g := range groups {
		out[i] = *g
	}
	return out
}

// helloDeployment checks the rendered Bundle is exactly the hello Deployment
// and returns it.
func helloDeployment(t *testing.T, out *renderer.Output) *appsv1.Deployment {
	t.Helper()
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "Deployment" {
		t.Fatalf("want one Deployment, got:\n%s", out.YAML)
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[0].Object, d, true); err != nil {
		t.Fatalf("rendered Deployment: %v", err)
	}
	return d
}

func TestGitopsExample_BundleRendersForDevClusters(t *testing.T) {
	objs := buildGitops(t)
	bundle := find[*fleet.Bundle](t, objs, "hello")
	var groups []*fleet.ClusterGroup
	for _, o := range objs {
		if g, ok := o.obj.(*fleet.ClusterGroup); ok {
			groups = append(groups, g)
		}
	}
	// dev-1 as committed, and dev-2 as the agent-initiated registration
	// with `--set-string labels.env=dev` creates it.
	dev1 := find[*fleet.Cluster](t, objs, "dev-1")
	dev2 := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "dev-2", Labels: map[string]string{"env": "dev"}}}
	for _, c := range []*fleet.Cluster{dev1, dev2} {
		t.Run(c.Name, func(t *testing.T) {
			out := controllerRender(t, bundle, c, groups)
			if out == nil {
				t.Fatalf("no target of Bundle hello selects cluster %s (labels %v)", c.Name, c.Labels)
			}
			d := helloDeployment(t, out)
			if d.Name != "hello" || d.Namespace != "hello" {
				t.Errorf("Deployment %s/%s, want hello/hello", d.Namespace, d.Name)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas %v, want 1", d.Spec.Replicas)
			}
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("containers: %+v", pod.Containers)
			}
			ctr := pod.Containers[0]
			// The dev environment preloads exactly this image under this
			// name; IfNotPresent makes its nodes use it.
			if ctr.Image != "registry.k8s.io/pause:3.10" || ctr.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("image %q pull policy %q, want registry.k8s.io/pause:3.10 IfNotPresent", ctr.Image, ctr.ImagePullPolicy)
			}
			psc := pod.SecurityContext
			if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65535 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Errorf("pod securityContext %+v, want runAsNonRoot with runAsUser 65535", psc)
			}
			if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want cpu and memory requests and a memory limit", ctr.Resources)
			}
			// The overlay ran on the chart's output.
			if d.Labels["app.kubernetes.io/part-of"] != "fleet-examples" || d.Spec.Template.Labels["app.kubernetes.io/part-of"] != "fleet-examples" ||
				d.Spec.Selector.MatchLabels["app.kubernetes.io/part-of"] != "" || d.Annotations["example.com/owner"] != "platform-team" ||
				pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 5 {
				t.Errorf("the kustomize overlay was not applied as written:\n%s", out.YAML)
			}
			// What a reviewer sees with `fleet render bundle` is what the
			// controller deploys to a dev cluster.
			review, err := renderer.RenderBundle(bundle, c, derefGroups(groups))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(review.YAML, out.YAML) {
				t.Errorf("fleet render bundle shows other manifests than the controller deploys to %s\n--- review\n%s\n--- controller\n%s", c.Name, review.YAML, out.YAML)
			}
		})
	}

	// The prod target customises the chart values: prod-eu (clusters/more)
	// gets two replicas, in `fleet render bundle` as in the controller.
	prod, err := readCluster(gitopsDir + "/clusters/more/prod-eu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := controllerRender(t, bundle, prod, groups)
	if out == nil {
		t.Fatal("no target of Bundle hello selects prod-eu")
	}
	if d := helloDeployment(t, out); d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("prod-eu: replicas %v, want 2 from the prod target", d.Spec.Replicas)
	}
	review, err := renderer.RenderBundle(bundle, prod, derefGroups(groups))
	if err != nil || !bytes.Equal(review.YAML, out.YAML) {
		t.Errorf("fleet render bundle for prod-eu differs from the controller's render (%v)", err)
	}
	edge, err := readCluster(gitopsDir + "/clusters/more/edge-042.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if controllerRender(t, bundle, edge, groups) != nil {
		t.Error("Bundle hello must not select edge-042 (env=edge)")
	}
}

// TestGitopsExample_ClustersRenderWithFleetRenderAgent renders every Cluster
// of the example, built or in clusters/more, with `fleet render agent` and
// the example controller config, and checks `helm template` with the values
// gives the same bytes (render_test.go covers clusters/*.yaml; the files in
// clusters/more are checked here).
func TestGitopsExample_ClustersRenderWithFleetRenderAgent(t *testing.T) {
	clis := renderertest.HelmCLIs(t)
	files, _ := filepath.Glob(gitopsDir + "/clusters/*.yaml")
	more, _ := filepath.Glob(gitopsDir + "/clusters/more/*.yaml")
	files = append(files, more...)
	if len(files) < 3 {
		t.Fatalf("clusters found: %v", files)
	}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, gitopsDir+"/"), func(t *testing.T) {
			cluster, err := readCluster(f)
			if err != nil {
				t.Fatal(err)
			}
			manifests, err := runCLI(t, "render", "agent", "--cluster", f, "--config", gitopsConfig)
			if err != nil {
				t.Fatal(err)
			}
			values, err := runCLI(t, "render", "agent", "--cluster", f, "--config", gitopsConfig, "-o", "values")
			if err != nil {
				t.Fatal(err)
			}
			objs, err := renderer.DecodeObjects(manifests)
			if err != nil {
				t.Fatal(err)
			}
			var deploy *unstructured.Unstructured
			bootstrap := false
			for _, o := range objs {
				if o.GetKind() == "Deployment" && o.GetName() == "fleet-agent" {
					deploy = o
				}
				bootstrap = bootstrap || (o.GetKind() == "Secret" && o.GetName() == registration.BootstrapSecretName)
			}
			if deploy == nil {
				t.Fatalf("no fleet-agent Deployment in:\n%s", manifests)
			}
			if deploy.GetNamespace() != agentvalues.AgentNamespace(cluster) {
				t.Errorf("agent namespace %q, want %q", deploy.GetNamespace(), agentvalues.AgentNamespace(cluster))
			}
			if bootstrap != (cluster.Spec.KubeConfigSecret != "") {
				t.Errorf("bootstrap Secret rendered: %v; want it exactly for manager-initiated clusters", bootstrap)
			}
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(deploy.Object, d, true); err != nil {
				t.Fatal(err)
			}
			gen := ""
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "GENERATION" {
					gen = e.Value
				}
			}
			if gen != fmt.Sprint(cluster.Spec.RedeployAgentGeneration) {
				t.Errorf("the agent's GENERATION env var is %q, want redeployAgentGeneration %d", gen, cluster.Spec.RedeployAgentGeneration)
			}

			vf := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(vf, values, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, h := range clis {
				cmd := h.Command(t, "template", "fleet-agent", "../../charts/fleet-agent", "-n", agentvalues.AgentNamespace(cluster), "-f", vf)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				helmOut, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s template: %v: %s", h.Name, err, stderr.String())
				}
				if !bytes.Equal(helmOut, manifests) {
					t.Errorf("%s template with the values differs from fleet render agent", h.Name)
				}
			}
		})
	}
}

// TestGitopsExample_AppliedToARealUpstream applies the kustomize build to a
// real API server (CRD schemas, CEL rules and admission policies apply) with
// dev-1's kubeconfig pointing at a real downstream, as `fleet-dev demo`
// does, runs the controller with the example config, and checks it acts on
// every object: the agent is pushed to dev-1, the token gets its values,
// the group counts dev-1, and dev-1 gets the hello Bundle's manifests.
func TestGitopsExample_AppliedToARealUpstream(t *testing.T) {
	env := testenv.StartControlPlanes(t, controlplane.Options{Downstreams: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	up, down := env.Upstream.Client, env.Downstreams[0].Client

	cfgData, err := os.ReadFile(gitopsConfig)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(cfgData, cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.FromConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	ctrlCtx, stopCtrl := context.WithCancel(ctx)
	c, err := controller.New(ctrlCtx, controller.Options{RestConfig: env.Upstream.Config, InitialConfig: cfg, MetricsAddress: "0", ProbeAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	ctrlRun := testenv.Go(ctrlCtx, "controller", c.Start)
	defer func() {
		stopCtrl()
		if err := ctrlRun.Wait(time.Minute); err != nil {
			t.Error(err)
		}
	}()

	var objs []*unstructured.Unstructured
	for _, o := range buildGitops(t) {
		if s, ok := o.obj.(*corev1.Secret); ok && s.Name == "dev-1-kubeconfig" {
			s.StringData["value"] = string(env.Downstreams[0].Kubeconfig)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(o.gvk)
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u.Object, "status")
		objs = append(objs, u)
	}
	if _, err := apply.NewManager(up).ApplyAllStaged(ctx, objs, ssa.DefaultApplyOptions()); err != nil {
		t.Fatalf("the upstream API server refuses examples/gitops: %v", err)
	}

	wait := func(what string, cond func() error) {
		t.Helper()
		testenv.Eventually(t, time.Until(deadline), what, cond)
	}
	key := client.ObjectKey{Namespace: "fleet-default", Name: "dev-1"}
	wait("dev-1 imported (agent pushed at generation 1)", func() error {
		cl := &fleet.Cluster{}
		if err := up.Get(ctx, key, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, fleet.ImportedCondition) || cl.Status.AgentDeployedGeneration == nil || *cl.Status.AgentDeployedGeneration != 1 {
			return fmt.Errorf("conditions %+v", cl.Status.Conditions)
		}
		return nil
	})
	if err := down.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemNamespace, Name: "fleet-agent"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("the agent Deployment is not in dev-1: %v", err)
	}

	var tokenValues []byte
	wait("dev-token's values Secret", func() error {
		tok := &fleet.ClusterRegistrationToken{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: "fleet-default", Name: "dev-token"}, tok); err != nil {
			return err
		}
		if tok.Status.SecretName == "" || tok.Status.Expires == nil {
			return fmt.Errorf("status %+v", tok.Status)
		}
		s := &corev1.Secret{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: "fleet-default", Name: tok.Status.SecretName}, s); err != nil {
			return err
		}
		var v map[string]any
		if err := yaml.Unmarshal(s.Data["values"], &v); err != nil {
			return err
		}
		if v["token"] == "" || v["tokenName"] != "dev-token" || v["clusterNamespace"] != "fleet-default" || v["apiServerURL"] != cfg.APIServerURL {
			return fmt.Errorf("values: keys %v", slices.Sorted(maps.Keys(v)))
		}
		tokenValues = s.Data["values"]
		return nil
	})
	checkReadmeTokenValues(t, tokenValues)
	// `fleet render agent --token` shows the same values file offline, with
	// the bearer token as a placeholder.
	offline, err := runCLI(t, "render", "agent", "--token", gitopsDir+"/tokens/dev-token.yaml", "--config", gitopsConfig, "-o", "values")
	if err != nil {
		t.Fatal(err)
	}
	written, err := agentvalues.Parse(tokenValues)
	if err != nil {
		t.Fatal(err)
	}
	written.Token = agentvalues.TokenPlaceholder
	if want, _ := written.YAML(); !bytes.Equal(offline, want) {
		t.Errorf("fleet render agent --token prints another values file than the controller writes:\n--- fleet render agent\n%s\n--- values Secret (token replaced)\n%s", offline, want)
	}

	wait("ClusterGroup dev counting dev-1", func() error {
		g := &fleet.ClusterGroup{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: "fleet-default", Name: "dev"}, g); err != nil {
			return err
		}
		if g.Status.ClusterCount != 1 {
			return fmt.Errorf("status %+v", g.Status)
		}
		return nil
	})

	// The controller's content for dev-1 is the render checked above.
	groups := []*fleet.ClusterGroup{}
	var bundle *fleet.Bundle
	var dev1 *fleet.Cluster
	for _, o := range buildGitops(t) {
		switch v := o.obj.(type) {
		case *fleet.ClusterGroup:
			groups = append(groups, v)
		case *fleet.Bundle:
			if v.Name == "hello" {
				bundle = v
			}
		case *fleet.Cluster:
			dev1 = v
		}
	}
	want := controllerRender(t, bundle, dev1, groups)
	bdKey := client.ObjectKey{Namespace: names.ClusterNamespace("fleet-default", "dev-1"), Name: "hello"}
	wait("BundleDeployment hello for dev-1 with its content", func() error {
		bd := &fleet.BundleDeployment{}
		if err := up.Get(ctx, bdKey, bd); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: bdKey.Namespace, Name: bundlecontent.SecretName(bd.Name)}, s); err != nil {
			return err
		}
		got, err := bundlecontent.Decode(s, bundlecontent.SplitDeploymentID(bd.Spec.DeploymentID))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want.YAML) {
			return fmt.Errorf("content differs from the render\n--- controller\n%s\n--- render\n%s", got, want.YAML)
		}
		if bd.Spec.Options.DefaultNamespace != "hello" {
			return fmt.Errorf("options %+v", bd.Spec.Options)
		}
		return nil
	})
	// The team access Bundle goes to dev-1 (and, by its target, only there).
	wait("BundleDeployment payments-view for dev-1", func() error {
		return up.Get(ctx, client.ObjectKey{Namespace: bdKey.Namespace, Name: "payments-view"}, &fleet.BundleDeployment{})
	})
	b := &fleet.Bundle{}
	if err := up.Get(ctx, client.ObjectKeyFromObject(bundle), b); err != nil {
		t.Fatal(err)
	}
	if meta.IsStatusConditionTrue(b.Status.Conditions, fleet.StalledCondition) {
		t.Errorf("Bundle hello is stalled: %+v", b.Status.Conditions)
	}
}

// readme returns examples/gitops/README.md.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(gitopsDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeMustShow fails unless the README shows output right after the
// command line, as a reader running the command would see it.
func readmeMustShow(t *testing.T, doc, command, output string) {
	t.Helper()
	if !strings.Contains(doc, "$ "+command+"\n"+output) {
		t.Errorf("examples/gitops/README.md must show, as real output of\n  $ %s\nthis (update the README):\n%s", command, output)
	}
}

// checkReadmeTokenValues checks the agent-initiated walkthrough of the
// README against a values file made by the controller with the example
// config: the values shown (bearer token cut) and what `helm template`
// makes of them with the walkthrough's flags.
func checkReadmeTokenValues(t *testing.T, values []byte) {
	t.Helper()
	doc := readme(t)
	var shown []string
	for _, l := range strings.SplitAfter(string(values), "\n") {
		if strings.HasPrefix(l, "token: ") {
			l = "token: <elided>\n"
		}
		shown = append(shown, l)
	}
	if block := "```yaml\n" + strings.Join(shown, "") + "```"; !strings.Contains(doc, block) {
		t.Errorf("examples/gitops/README.md must show the token's values file as the controller writes it (update the README):\n%s", block)
	}
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, values, 0o600); err != nil {
		t.Fatal(err)
	}
	// The README's line is what either CLI prints.
	var config string
	for _, h := range renderertest.HelmCLIs(t) {
		out, err := h.Command(t, "template", "fleet-agent", "../../charts/fleet-agent", "-n", "cattle-fleet-system", "-f", vf,
			"--set", "clientID=dev-2", "--set-string", "labels.env=dev").Output()
		if err != nil {
			t.Fatalf("%s template with the token's values: %v", h.Name, err)
		}
		var line string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "  config:") {
				line = l
			}
		}
		if config != "" && line != config {
			t.Errorf("the Helm CLIs print different config lines:\n%s\n%s", config, line)
		}
		config = line
	}
	readmeMustShow(t, doc, "helm template fleet-agent charts/fleet-agent -n cattle-fleet-system -f values.yaml --set clientID=dev-2 --set-string labels.env=dev | grep '  config:'", config+"\n")
}

// TestGitopsExample_ReadmeShowsRealReviewOutput replays the pull requests
// of examples/gitops/README.md (an agent setting change, a
// redeployAgentGeneration bump, adding prod-eu) and checks the README shows
// exactly what its commands print, so the walkthrough never drifts from
// what the renderer and the chart produce.
func TestGitopsExample_ReadmeShowsRealReviewOutput(t *testing.T) {
	diffTool, err := exec.LookPath("diff")
	if err != nil {
		t.Fatal("GNU diff is needed to replay the README's review commands")
	}
	doc := readme(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	render := func(cluster string, args ...string) string {
		out, err := runCLI(t, append([]string{"render", "agent", "--cluster", cluster, "--config", gitopsConfig}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return write(fmt.Sprintf("render-%d.yaml", len(args))+filepath.Base(cluster), out)
	}
	diff := func(a, b string) string {
		out, err := exec.Command(diffTool, "-u", "--label", "main", "--label", "pr", a, b).Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
			t.Fatalf("diff: %v", err)
		}
		return string(out)
	}

	main, err := os.ReadFile(gitopsDir + "/clusters/dev-1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const gen = "  redeployAgentGeneration: 1\n"
	if !bytes.Contains(main, []byte(gen)) {
		t.Fatalf("clusters/dev-1.yaml has no %q line to change", gen)
	}
	prs := map[string]string{
		"setting": gen + `  agentTolerations:
    - key: dedicated
      operator: Equal
      value: platform
      effect: NoSchedule
  agentEnvVars:
    - name: HTTPS_PROXY
      value: http://proxy.internal:3128
`,
		"generation": "  redeployAgentGeneration: 2\n",
	}
	for name, repl := range prs {
		t.Run(name, func(t *testing.T) {
			mainDir, prDir := filepath.Join(dir, name, "main"), filepath.Join(dir, name, "pr")
			for _, d := range []string{mainDir, prDir} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			before := filepath.Join(mainDir, "dev-1.yaml")
			after := filepath.Join(prDir, "dev-1.yaml")
			if err := os.WriteFile(before, main, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(after, bytes.Replace(main, []byte(gen), []byte(repl), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			readmeMustShow(t, doc, "diff -u --label main --label pr /tmp/dev-1.main.yaml clusters/dev-1.yaml", diff(before, after))
			readmeMustShow(t, doc, "diff -u --label main --label pr <(render /tmp/dev-1.main.yaml) <(render clusters/dev-1.yaml)",
				diff(render(before), render(after)))
			readmeMustShow(t, doc, "diff -u --label main --label pr <(render /tmp/dev-1.main.yaml -o values) <(render clusters/dev-1.yaml -o values)",
				diff(render(before, "-o", "values"), render(after, "-o", "values")))
		})
	}

	grep := func(file, pattern string) string {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(pattern)
		var b strings.Builder
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if re.MatchString(strings.TrimSuffix(l, "\n")) {
				b.WriteString(l)
			}
		}
		return b.String()
	}
	prod := gitopsDir + "/clusters/more/prod-eu.yaml"
	const manifestsRE = `^kind:|^  namespace:|image:|priorityClassName:|minAvailable:|HTTPS_PROXY`
	const valuesRE = `^(apiServerURL|clientID|clusterNamespace|generation|token|tokenName):|^  systemNamespace`
	readmeMustShow(t, doc, "render clusters/prod-eu.yaml | grep -E '"+manifestsRE+"'", grep(render(prod), manifestsRE))
	readmeMustShow(t, doc, "render clusters/prod-eu.yaml -o values | grep -E '"+valuesRE+"'", grep(render(prod, "-o", "values"), valuesRE))
}
