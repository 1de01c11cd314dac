package bootstrap_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/bootstrap"
	"github.com/gitops-fleet/fleet/controller/cluster"
	"github.com/gitops-fleet/fleet/controller/token"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
)

const ws = config.DefaultBootstrapNamespace

var localKey = client.ObjectKey{Namespace: ws, Name: config.LocalClusterName}

// waitLocal waits for Cluster local to exist and be imported (the agent
// pushed), and returns it.
func waitLocal(t *testing.T) *fleet.Cluster {
	t.Helper()
	c := &fleet.Cluster{}
	testenv.Eventually(t, 2*time.Minute, "Cluster fleet-local/local imported", func() error {
		if err := up.Get(t.Context(), localKey, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, fleet.ImportedCondition)
		if !c.DeletionTimestamp.IsZero() || c.Status.AgentDeployedGeneration == nil || cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("not imported yet: %+v", c.Status.Conditions)
		}
		return nil
	})
	return c
}

// localToken returns the bearer token in Secret local-cluster.
func localToken(t *testing.T) (string, *corev1.Secret) {
	t.Helper()
	s := &corev1.Secret{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: bootstrap.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(s.Data[cluster.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil || kc.AuthInfos[ctx.AuthInfo] == nil || kc.AuthInfos[ctx.AuthInfo].Token == "" {
		t.Fatalf("the kubeconfig of Secret local-cluster holds no token")
	}
	return kc.AuthInfos[ctx.AuthInfo].Token, s
}

// TestLocalCluster_IsRegisteredLikeAnyManagerInitiatedCluster: with the
// defaults the controller makes workspace fleet-local, Cluster local
// (label name=local, the agent namespace of the configuration), its
// kubeconfig Secret local-cluster and ClusterGroup default selecting it; the
// Cluster reconciler then pushes the agent into this very control plane,
// telling it the controller's own API server address (no apiServerURL is
// configured).
func TestLocalCluster_IsRegisteredLikeAnyManagerInitiatedCluster(t *testing.T) {
	ctx := t.Context()
	c := waitLocal(t)
	if c.Labels[bootstrap.NameLabel] != "local" || c.Labels[fleet.ManagedLabel] != "true" || c.Labels[bootstrap.Label] != "true" {
		t.Errorf("labels %v", c.Labels)
	}
	if c.Spec.KubeConfigSecret != bootstrap.SecretName || c.Spec.AgentNamespace != config.DefaultSystemNamespace || c.Spec.ClientID == "" {
		t.Errorf("spec %+v", c.Spec)
	}

	_, s := localToken(t)
	if got := string(s.Data[cluster.APIServerURLKey]); got != env.Upstream.Config.Host {
		t.Errorf("apiServerURL %q, want the controller's own API server %q", got, env.Upstream.Config.Host)
	}
	if string(s.Data[cluster.APIServerCAKey]) != string(env.Upstream.Config.CAData) {
		t.Errorf("apiServerCA is not the API server's CA")
	}
	kc, _ := clientcmd.Load(s.Data[cluster.KubeconfigKey])
	for name, cl := range kc.Clusters {
		if cl.Server != env.Upstream.Config.Host || string(cl.CertificateAuthorityData) != string(env.Upstream.Config.CAData) {
			t.Errorf("kubeconfig cluster %s: server %q", name, cl.Server)
		}
	}

	g := &fleet.ClusterGroup{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: bootstrap.GroupName}, g); err != nil {
		t.Fatal(err)
	}
	if g.Spec.Selector == nil || g.Spec.Selector.MatchLabels[bootstrap.NameLabel] != "local" || len(g.Spec.Selector.MatchLabels) != 1 {
		t.Errorf("ClusterGroup default selects %v", g.Spec.Selector)
	}
	testenv.Eventually(t, time.Minute, "ClusterGroup default counts the local cluster", func() error {
		if err := up.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if g.Status.ClusterCount != 1 {
			return fmt.Errorf("clusterCount %d", g.Status.ClusterCount)
		}
		return nil
	})

	// The push: the agent and its bootstrap Secret in the agent namespace
	// of the same cluster, pointing back at it.
	d := &appsv1.Deployment{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemNamespace, Name: "fleet-agent"}, d); err != nil {
		t.Fatalf("agent Deployment: %v", err)
	}
	if d.Labels["fleet.cattle.io/name"] != names.AgentBundle("local") {
		t.Errorf("agent Deployment labels %v: the removal command in docs/operations.md selects fleet.cattle.io/name=%s", d.Labels, names.AgentBundle("local"))
	}
	bs := &corev1.Secret{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: config.DefaultSystemNamespace, Name: registration.BootstrapSecretName}, bs); err != nil {
		t.Fatalf("agent bootstrap Secret: %v", err)
	}
	if got := string(bs.Data[registration.BootstrapKeyAPIServerURL]); got != env.Upstream.Config.Host {
		t.Errorf("the local agent is told to reach %q, want %q", got, env.Upstream.Config.Host)
	}
	if got := string(bs.Data[registration.BootstrapKeyClusterNamespace]); got != ws {
		t.Errorf("the local agent registers into %q", got)
	}
}

// TestLocalCluster_TokenIsAShortLivedTokenOfTheBootstrapServiceAccount: the
// kubeconfig's credential authenticates as fleet-controller-bootstrap (not
// as the controller), expires within TokenLifetime, and is in no log, event,
// status or Bundle.
func TestLocalCluster_TokenIsAShortLivedTokenOfTheBootstrapServiceAccount(t *testing.T) {
	ctx := t.Context()
	waitLocal(t)
	bearer, s := localToken(t)

	cs, err := kubernetes.NewForConfig(env.Upstream.ConfigForToken(bearer))
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "system:serviceaccount:" + config.DefaultSystemNamespace + ":" + bootstrap.ServiceAccountName
	if got := review.Status.UserInfo.Username; got != want {
		t.Errorf("the token authenticates as %q, want %q", got, want)
	}

	issued, err1 := time.Parse(time.RFC3339, s.Annotations[token.TokenIssuedAnnotation])
	expires, err2 := time.Parse(time.RFC3339, s.Annotations[token.TokenExpiresAnnotation])
	if err1 != nil || err2 != nil || expires.Sub(issued) > bootstrap.TokenLifetime+time.Minute || !expires.After(time.Now()) {
		t.Errorf("token issued %s, expires %s: want a lifetime of at most %s", issued, expires, bootstrap.TokenLifetime)
	}
	// The JWT itself says so too (not only the annotation).
	if exp := jwtExpiry(t, bearer); exp.Sub(time.Now()) > bootstrap.TokenLifetime+time.Minute {
		t.Errorf("the token expires at %s", exp)
	}

	if strings.Contains(logs.String(), bearer) {
		t.Error("the local cluster's token is in the controller's log")
	}
	events := &corev1.EventList{}
	if err := up.List(ctx, events, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	bundles := &fleet.BundleList{}
	if err := up.List(ctx, bundles, client.InNamespace(ws)); err != nil {
		t.Fatal(err)
	}
	c := &fleet.Cluster{}
	if err := up.Get(ctx, localKey, c); err != nil {
		t.Fatal(err)
	}
	for what, obj := range map[string]any{"events": events, "Bundles": bundles, "the Cluster": c} {
		b, _ := json.Marshal(obj)
		if strings.Contains(string(b), bearer) {
			t.Errorf("the local cluster's token is in %s of fleet-local", what)
		}
	}
}

// TestLocalCluster_TokenIsRenewedWhenDue: a token the annotations say is due
// for renewal is replaced by a fresh one, and the Cluster is not pushed again
// (the server did not change).
func TestLocalCluster_TokenIsRenewedWhenDue(t *testing.T) {
	ctx := t.Context()
	before := waitLocal(t)
	old, s := localToken(t)
	patch := client.MergeFrom(s.DeepCopy())
	past := time.Now().Add(-time.Hour).UTC()
	s.Annotations[token.TokenIssuedAnnotation] = past.Add(-time.Hour).Format(time.RFC3339)
	s.Annotations[token.TokenExpiresAnnotation] = past.Format(time.RFC3339)
	if err := up.Patch(ctx, s, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a fresh token in Secret local-cluster", func() error {
		if bearer, s := localToken(t); bearer == old || s.Annotations[token.TokenExpiresAnnotation] == past.Format(time.RFC3339) {
			return fmt.Errorf("still the old token (expires %s)", s.Annotations[token.TokenExpiresAnnotation])
		}
		return nil
	})
	after := waitLocal(t)
	if after.Status.KubeConfigServerHash != before.Status.KubeConfigServerHash || *after.Status.AgentDeployedGeneration != *before.Status.AgentDeployedGeneration {
		t.Errorf("a token renewal changed what the agent was given: %+v", after.Status)
	}
}

// TestLocalCluster_ComesBackWhenDeleted: a deleted local Cluster (the
// Cluster reconciler cleans up after it as after any) is made again and
// pushed again, with a new clientID.
func TestLocalCluster_ComesBackWhenDeleted(t *testing.T) {
	ctx := t.Context()
	before := waitLocal(t)
	if err := up.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "a new Cluster fleet-local/local", func() error {
		c := &fleet.Cluster{}
		if err := up.Get(ctx, localKey, c); err != nil {
			return err
		}
		if c.UID == before.UID {
			return fmt.Errorf("still the deleted one")
		}
		return nil
	})
	after := waitLocal(t)
	if after.Spec.ClientID == before.Spec.ClientID {
		t.Errorf("the new local Cluster kept clientID %s", after.Spec.ClientID)
	}
}

// TestLocalCluster_BundlesOfTheWorkspaceTargetIt: a Bundle in fleet-local
// targeting ClusterGroup default gets a BundleDeployment for the local
// cluster, as for any cluster.
func TestLocalCluster_BundlesOfTheWorkspaceTargetIt(t *testing.T) {
	ctx := t.Context()
	c := waitLocal(t)
	b := &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "local-hello"},
		Spec: fleet.BundleSpec{
			BundleDeploymentOptions: fleet.BundleDeploymentOptions{DefaultNamespace: "hello"},
			Resources:               []fleet.BundleResource{{Name: "cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\ndata:\n  greeting: hi\n"}},
			Targets:                 []fleet.BundleTarget{{Name: "local", ClusterGroup: bootstrap.GroupName}},
		},
	}
	if err := up.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Delete(ctx, b) })
	testenv.Eventually(t, time.Minute, "a BundleDeployment of local-hello for the local cluster", func() error {
		bd := &fleet.BundleDeployment{}
		return up.Get(ctx, client.ObjectKey{Namespace: names.ClusterNamespace(c.Namespace, c.Name), Name: b.Name}, bd)
	})
}

// TestLocalCluster_TurnedOffMakesNothingAndDeletesNothing: with
// bootstrap.enabled false (hot-reloaded from the ConfigMap) an existing local
// Cluster is left as it is; once deleted, it does not come back, and a
// workspace the configuration names is not made. Turned on again, it comes
// back, once a Cluster local it did not make is out of the way. (Runs last:
// it changes the controller's configuration.)
func TestLocalCluster_TurnedOffMakesNothingAndDeletesNothing(t *testing.T) {
	ctx := t.Context()
	before := waitLocal(t)
	setConfig(t, `{"bootstrap": {"enabled": false}}`, false)

	testenv.Consistently(t, 3*time.Second, "the local Cluster stays while bootstrap is off", func() error {
		c := &fleet.Cluster{}
		if err := up.Get(ctx, localKey, c); err != nil {
			return err
		}
		if c.UID != before.UID || !c.DeletionTimestamp.IsZero() {
			return fmt.Errorf("the local Cluster changed: %s, deleting %v", c.UID, c.DeletionTimestamp)
		}
		return nil
	})

	if err := up.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the local Cluster gone", func() error {
		if err := up.Get(ctx, localKey, &fleet.Cluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, "no local Cluster while bootstrap is off", func() error {
		if err := up.Get(ctx, localKey, &fleet.Cluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the local Cluster came back (%v)", err)
		}
		return nil
	})

	// Off, with another workspace named: nothing is made there either.
	setConfig(t, `{"bootstrap": {"enabled": false, "namespace": "fleet-local-off"}}`, false)
	testenv.Consistently(t, 3*time.Second, "no workspace fleet-local-off while bootstrap is off", func() error {
		if err := up.Get(ctx, client.ObjectKey{Name: "fleet-local-off"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace fleet-local-off made (%v)", err)
		}
		return nil
	})

	// On again, with a Cluster local someone else made in the way: it is
	// never written (a Warning event says why); deleted, the local cluster
	// is made.
	mine := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: config.LocalClusterName, Labels: map[string]string{"team": "mine"}}}
	if err := up.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	setConfig(t, `{"bootstrap": {"enabled": true}}`, true)
	testenv.Eventually(t, time.Minute, "an ObjectConflict event on the Cluster in the way", func() error {
		events := &corev1.EventList{}
		if err := up.List(ctx, events, client.InNamespace(ws)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == bootstrap.ObjectConflictReason && e.InvolvedObject.UID == mine.UID {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})
	got := &fleet.Cluster{}
	if err := up.Get(ctx, localKey, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.KubeConfigSecret != "" || got.Labels[bootstrap.Label] != "" || got.Labels[bootstrap.NameLabel] != "" {
		t.Errorf("the bootstrap wrote a Cluster it did not make: labels %v, spec %+v", got.Labels, got.Spec)
	}
	if err := up.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitLocal(t)
}

// setConfig writes the controller's ConfigMap, as helm upgrade would, and
// waits until the controller runs with it.
func setConfig(t *testing.T, doc string, enabled bool) {
	t.Helper()
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.DefaultSystemNamespace, Name: config.ConfigMapName}}
	err := up.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	switch {
	case apierrors.IsNotFound(err):
		cm.Data = map[string]string{config.ConfigMapKey: doc}
		err = up.Create(ctx, cm)
	case err == nil:
		cm.Data = map[string]string{config.ConfigMapKey: doc}
		err = up.Update(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the controller running with "+doc, func() error {
		got := ctrl.Config.Get()
		if got.BootstrapEnabled() != enabled || got.GetBootstrapNamespace() != want.GetBootstrapNamespace() {
			return fmt.Errorf("bootstrap %+v", got.Bootstrap)
		}
		return nil
	})
}

// jwtExpiry reads the exp claim of a JWT (no verification: the API server
// verified it above).
func jwtExpiry(t *testing.T, jwt string) time.Time {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Unix(claims.Exp, 0)
}
