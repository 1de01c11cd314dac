package registration_test

// The trust boundary of a token holder (shared/SPEC.md §6): it may create
// ClusterRegistrations for its token's workspace, and must never take over an
// existing Cluster (rereg_test.go), pre-approve its own registration,
// register without a token, or get anything for a refused registration. Every
// refusal here is the real request, made as that identity against the real
// API server (admission policies installed) and the real controller.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/controller/admission"
	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/names"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/kustomize/base/policies"
	"github.com/gitops-fleet/fleet/renderer"
)

// chartClusterRole creates (once) the ClusterRole of that name as
// charts/fleet ships it, so the tests grant exactly what the chart grants.
func chartClusterRole(t *testing.T, name string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := renderer.LoadChartDir(filepath.Join(root, "charts", "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: "fleet", Namespace: config.DefaultSystemNamespace})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" || o.GetName() != name {
			continue
		}
		if err := up.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("charts/fleet has no ClusterRole %s", name)
}

// user makes a ServiceAccount in ws bound there (RoleBinding) to the
// ClusterRole clusterRole, or to a Role with rules when clusterRole is
// empty, and returns a client acting as it: a person the upstream RBAC
// knows.
func user(t *testing.T, ws, name, clusterRole string, rules ...rbacv1.PolicyRule) identity {
	t.Helper()
	ctx := t.Context()
	if err := up.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}}); err != nil {
		t.Fatal(err)
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}
	if clusterRole == "" {
		ref = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
		if err := up.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name}, Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: name},
		RoleRef:    ref,
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ws, Name: name}},
	}); err != nil {
		t.Fatal(err)
	}
	bearer, err := env.Upstream.ServiceAccountToken(ctx, ws, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	remember(bearer)
	return as(t, bearer)
}

func registrationRule(verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: verbs}
}

// newRegistration is a registration as an agent would make it, with the
// token label when token is set.
func newRegistration(ws, token, clientID string) *fleet.ClusterRegistration {
	reg := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, GenerateName: "request-"},
		Spec:       fleet.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: randomID("random-")},
	}
	if token != "" {
		reg.Labels = map[string]string{fleet.RegistrationTokenLabel: token}
	}
	return reg
}

// refusedBy waits until do fails with an error containing want: a request
// that RBAC allows (once the binding reached the API server's authorizer)
// and an admission policy refuses.
func refusedBy(t *testing.T, what, want string, do func() error) error {
	t.Helper()
	var err error
	testenv.Eventually(t, 15*time.Second, what+" to be refused by the admission policy", func() error {
		err = do()
		if err == nil {
			return errors.New("the request succeeded")
		}
		if !strings.Contains(err.Error(), want) {
			return fmt.Errorf("refused, but not by the policy: %v", err)
		}
		return nil
	})
	return err
}

func annotate(reg *fleet.ClusterRegistration, key, value string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)))
}

// heartbeat sets the Cluster's status.agent.lastSeen as its agent does (a
// fresh request identity may wait for its RoleBinding to reach the API
// server's authorizer).
func heartbeat(t *testing.T, c client.Client, ws, cluster string, at time.Time) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"status":{"agent":{"lastSeen":%q}}}`, at.UTC().Format(time.RFC3339))))
	testenv.Eventually(t, 10*time.Second, "the heartbeat of Cluster "+ws+"/"+cluster, func() error {
		return c.Status().Patch(t.Context(), &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: cluster}}, patch)
	})
}

// waitObjectEvent waits for an event with reason about the object of kind
// and name in namespace ns whose note contains noteHas.
func waitObjectEvent(t *testing.T, ns, kind, name, reason, noteHas string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("event %s on %s %s/%s", reason, kind, ns, name), func() error {
		list := &eventsv1.EventList{}
		if err := up.List(t.Context(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, noteHas) {
				return nil
			}
		}
		return fmt.Errorf("%d events, none matching", len(list.Items))
	})
}

// nothingMadeFor checks that a registration that is not granted got no
// credential, no access to one and no request identity.
func nothingMadeFor(t *testing.T, a *agent, reg *fleet.ClusterRegistration) {
	t.Helper()
	key := client.ObjectKey{Namespace: config.DefaultSystemRegistrationNS, Name: registration.CredentialSecretName(reg.Spec.ClientID, reg.Spec.ClientRandom)}
	if err := up.Get(t.Context(), key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("credential Secret of registration %s: %v", reg.Name, err)
	}
	if a != nil {
		// It may read no Secret there (an older agent's Role for its one
		// credential Secret is made only with the grant).
		if err := a.importer.Get(t.Context(), key, &corev1.Secret{}); !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			t.Errorf("the import identity reads a credential Secret of registration %s: want none, got %v", reg.Name, err)
		}
	}
	sel := client.MatchingLabels{registration.RegistrationLabel: reg.Name, registration.RegistrationNamespaceLabel: reg.Namespace}
	sas := &corev1.ServiceAccountList{}
	if err := up.List(t.Context(), sas, sel); err != nil {
		t.Fatal(err)
	}
	roles, bindings := countRBAC(t, sel)
	if len(sas.Items)+roles+bindings > 0 {
		t.Errorf("registration %s has %d ServiceAccounts, %d Roles, %d RoleBindings", reg.Name, len(sas.Items), roles, bindings)
	}
	if got := getReg(t, reg.Namespace, reg.Name); got.Status.Granted || len(got.Status.Credential) > 0 {
		t.Errorf("registration %s is granted: %+v", reg.Name, got.Status)
	}
}

func TestTrust_ImportIdentityCannotPreApproveOrRegisterWithoutItsToken(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	imp := as(t, tokenWith(t, ws, "manual", fleet.ClusterRegistrationTokenSpec{Approval: fleet.ApprovalManual}))
	ctx := t.Context()

	preApproved := newRegistration(ws, "manual", randomID("cid-"))
	preApproved.Annotations = map[string]string{fleet.ApprovedAnnotation: "true"}
	if err := imp.Create(ctx, preApproved); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `needs the "approve" verb`) {
		t.Errorf("import identity creating a pre-approved registration: want Forbidden by the approval policy, got %v", err)
	}
	for what, tokenLabel := range map[string]string{"without the token label": "", "naming another token": "other"} {
		err := imp.Create(ctx, newRegistration(ws, tokenLabel, randomID("cid-")))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "must carry label fleet.cattle.io/registration-token naming that token (manual)") {
			t.Errorf("import identity creating a registration %s: want Forbidden, got %v", what, err)
		}
	}
	empty := newRegistration(ws, "manual", randomID("cid-"))
	empty.Labels[fleet.RegistrationTokenLabel] = ""
	if err := imp.Create(ctx, empty); !apierrors.IsForbidden(err) {
		t.Errorf("import identity creating a registration with an empty token label: want Forbidden, got %v", err)
	}
	list := &fleet.ClusterRegistrationList{}
	if err := up.List(ctx, list, client.InNamespace(ws)); err != nil || len(list.Items) != 0 {
		t.Fatalf("refused requests left %d registrations (%v)", len(list.Items), err)
	}

	// What it may do: create a registration for its token, which waits for
	// an approver.
	reg := newRegistration(ws, "manual", randomID("cid-"))
	if err := imp.Create(ctx, reg); err != nil {
		t.Fatalf("import identity creating its registration: %v", err)
	}
	waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.PendingApprovalReason)
	// It cannot approve it afterwards; it reads it by name (its answer
	// comes in its status), and no other way.
	if err := imp.Patch(ctx, reg, annotate(reg, fleet.ApprovedAnnotation, "true")); !apierrors.IsForbidden(err) {
		t.Errorf("import identity approving its registration: want Forbidden, got %v", err)
	}
	if err := imp.Get(ctx, client.ObjectKeyFromObject(reg), &fleet.ClusterRegistration{}); err != nil {
		t.Errorf("import identity reading its registration by name: %v", err)
	}
	if err := imp.List(ctx, &fleet.ClusterRegistrationList{}, client.InNamespace(ws)); !apierrors.IsForbidden(err) {
		t.Errorf("import identity listing registrations: want Forbidden, got %v", err)
	}
}

func TestTrust_RegistrationWithoutTokenNeedsTheRegisterVerb(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx := t.Context()
	// Someone allowed to create registrations, but not to register without
	// a token: the API server refuses.
	creator := user(t, ws, "creator", "", registrationRule("create", "get"))
	refusedBy(t, "a token-less registration by a user without the register verb", `needs the "register" verb on clusterregistrations in namespace `+ws, func() error {
		return creator.Create(ctx, newRegistration(ws, "", randomID("cid-")))
	})

	// The chart's fleet-registration-admin may; the registration is granted
	// as an admin's, without a token.
	chartClusterRole(t, "fleet-registration-admin")
	registrar := user(t, ws, "registrar", "fleet-registration-admin")
	reg := newRegistration(ws, "", randomID("cid-"))
	testenv.Eventually(t, 15*time.Second, "fleet-registration-admin creating a token-less registration", func() error {
		return registrar.Create(ctx, reg)
	})
	got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if got.Status.ClusterName != names.AutoClusterName(reg.Spec.ClientID) {
		t.Errorf("granted as %q", got.Status.ClusterName)
	}

	// So may a cluster-admin.
	byAdmin := newRegistration(ws, "", randomID("cid-"))
	if err := up.Create(ctx, byAdmin); err != nil {
		t.Fatalf("cluster-admin creating a token-less registration: %v", err)
	}
	waitCondition(t, ws, byAdmin.Name, metav1.ConditionTrue, fleet.GrantedReason)

	// The token label never changes afterwards, not even by an admin: it
	// decides which checks apply.
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"fleet.cattle.io/registration-token":"someone"}}}`))
	if err := up.Patch(ctx, byAdmin, label); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot be added, changed or removed") {
		t.Errorf("adding a token label to a registration: want Forbidden, got %v", err)
	}
}

// tableCell reads column of the registration name as `kubectl get
// clusterregistrations` shows it (the server's Table).
func tableCell(t *testing.T, ws, name, column string) (string, error) {
	t.Helper()
	cfg := rest.CopyConfig(env.Upstream.Config)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	u, err := url.JoinPath(cfg.Host, "/apis/fleet.cattle.io/v1alpha1/namespaces", ws, "clusterregistrations")
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		return "", fmt.Errorf("%s: %w", body, err)
	}
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == column })
	if col < 0 {
		return "", fmt.Errorf("no column %s in %v", column, table.ColumnDefinitions)
	}
	for _, row := range table.Rows {
		obj := &metav1.PartialObjectMetadata{}
		if err := json.Unmarshal(row.Object.Raw, obj); err == nil && obj.Name == name {
			return fmt.Sprint(row.Cells[col]), nil
		}
	}
	return "", fmt.Errorf("no row for %s", name)
}

func TestApproval_ManualRegistrationWaitsForAnApprover(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx := t.Context()
	a := newAgent(t, ws, "manual", tokenWith(t, ws, "manual", fleet.ClusterRegistrationTokenSpec{Approval: fleet.ApprovalManual}))
	reg := a.create(t, randomID("edge-"), map[string]string{"env": "edge"})

	got := waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.PendingApprovalReason)
	msg := meta.FindStatusCondition(got.Status.Conditions, fleet.GrantedCondition).Message
	for _, want := range []string{reg.Spec.ClientID, "env", "kubectl -n " + ws + " annotate clusterregistrations.fleet.cattle.io " + reg.Name + " fleet.cattle.io/approved=true"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	waitEvent(t, ws, reg.Name, fleet.PendingApprovalReason, reg.Name)
	testenv.Eventually(t, 10*time.Second, "kubectl get clusterregistrations to show PendingApproval", func() error {
		cell, err := tableCell(t, ws, reg.Name, "Reason")
		if err != nil {
			return err
		}
		if cell != fleet.PendingApprovalReason {
			return fmt.Errorf("Reason column %q", cell)
		}
		return nil
	})
	// Pending: nothing is made, not even the Cluster.
	time.Sleep(time.Second)
	nothingMadeFor(t, a, reg)
	if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: names.AutoClusterName(reg.Spec.ClientID)}, &fleet.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Cluster was made for a pending registration: %v", err)
	}

	// Someone who may update registrations but not approve them is refused
	// by the API server.
	editor := user(t, ws, "editor", "", registrationRule("get", "list", "patch", "update"))
	refusedBy(t, "approval by a user without the approve verb", `needs the "approve" verb on clusterregistrations in namespace `+ws, func() error {
		return editor.Patch(ctx, reg, annotate(reg, fleet.ApprovedAnnotation, "true"))
	})
	if getReg(t, ws, reg.Name).Annotations[fleet.ApprovedAnnotation] != "" {
		t.Fatal("the refused approval reached the registration")
	}

	// An approver (the chart's ClusterRole) approves; only "true" counts.
	chartClusterRole(t, "fleet-registration-approver")
	approver := user(t, ws, "approver", "fleet-registration-approver")
	refusedBy(t, "an approval with another value than true", "takes no other value", func() error {
		return approver.Patch(ctx, reg, annotate(reg, fleet.ApprovedAnnotation, "yes"))
	})
	if err := approver.Patch(ctx, reg, annotate(reg, fleet.ApprovedAnnotation, "true")); err != nil {
		t.Fatalf("approving as fleet-registration-approver: %v", err)
	}
	secret := a.waitCredential(t, reg, 30*time.Second)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	if string(secret.Data[registration.KeyClusterName]) != names.AutoClusterName(reg.Spec.ClientID) {
		t.Errorf("granted as %q", secret.Data[registration.KeyClusterName])
	}
}

func TestLabels_AgentLabelKeysRestrictWhatAgentsSet(t *testing.T) {
	cfg := controllerConfig()
	cfg.AgentLabelKeys = []string{"env", "example.com/*"}
	shared.Config.Set(cfg)
	t.Cleanup(func() { shared.Config.Set(controllerConfig()) })

	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", tokenWith(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{}))
	reg, secret := a.register(t, randomID("cid-"), map[string]string{
		"env":                      "prod",
		"region":                   "eu",
		"example.com/team":         "a",
		"fleet.cattle.io/shard-id": "s1",
	})
	clusterName := string(secret.Data[registration.KeyClusterName])
	c := &fleet.Cluster{}
	if err := up.Get(t.Context(), client.ObjectKey{Namespace: ws, Name: clusterName}, c); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"env": "prod", "example.com/team": "a", fleet.ClusterLabel: clusterName}
	if !maps.Equal(c.Labels, want) {
		t.Errorf("Cluster labels %v, want %v", c.Labels, want)
	}
	got := waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	msg := meta.FindStatusCondition(got.Status.Conditions, fleet.GrantedCondition).Message
	for _, w := range []string{`"region" (key not in agentLabelKeys)`, `"fleet.cattle.io/shard-id" (reserved prefix)`} {
		if !strings.Contains(msg, w) {
			t.Errorf("Granted message %q lacks %q", msg, w)
		}
	}
	waitObjectEvent(t, ws, "Cluster", clusterName, "AgentLabelsRefused", `"region" (key not in agentLabelKeys)`)
}

func TestLimit_TokenRegistersAtMostMaxClusters(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx := t.Context()
	a := newAgent(t, ws, "two", tokenWith(t, ws, "two", fleet.ClusterRegistrationTokenSpec{MaxClusters: ptr.To[int32](2)}))
	idA, idB, idC := randomID("a-"), randomID("b-"), randomID("c-")
	a.register(t, idA, nil)
	a.register(t, idB, nil)

	third := a.create(t, idC, nil)
	got := waitCondition(t, ws, third.Name, metav1.ConditionFalse, fleet.TokenLimitReachedReason)
	if msg := got.Status.Conditions[0].Message; !strings.Contains(msg, "raise spec.maxClusters") || !strings.Contains(msg, "may register 2 clusters") {
		t.Errorf("message: %s", msg)
	}
	refusedLeavesNothing(t, third)

	// A counted cluster registers again without taking another place.
	again, _ := a.register(t, idA, nil)
	waitCondition(t, ws, again.Name, metav1.ConditionTrue, fleet.GrantedReason)
	tok := &fleet.ClusterRegistrationToken{}
	if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: "two"}, tok); err != nil {
		t.Fatal(err)
	}
	wantClusters := []string{names.AutoClusterName(idA), names.AutoClusterName(idB)}
	slices.Sort(wantClusters)
	if !slices.Equal(tok.Status.RegisteredClusters, wantClusters) {
		t.Errorf("status.registeredClusters %v, want %v", tok.Status.RegisteredClusters, wantClusters)
	}

	// Raising the limit lets the refused registration through.
	if err := up.Patch(ctx, tok, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maxClusters":3}}`))); err != nil {
		t.Fatal(err)
	}
	a.waitCredential(t, third, 30*time.Second)
	waitCondition(t, ws, third.Name, metav1.ConditionTrue, fleet.GrantedReason)
	testenv.Eventually(t, 10*time.Second, "three registered clusters in the token's status", func() error {
		if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: "two"}, tok); err != nil {
			return err
		}
		if len(tok.Status.RegisteredClusters) != 3 || !slices.Contains(tok.Status.RegisteredClusters, names.AutoClusterName(idC)) {
			return fmt.Errorf("status.registeredClusters %v", tok.Status.RegisteredClusters)
		}
		return nil
	})
}

// readyz returns the controller's /readyz status code and body.
func readyz(ctx context.Context, t *testing.T) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probeAddress+"/readyz?verbose", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// restorePolicies puts the shipped admission policies back: creates the
// missing ones and replaces the spec fields of the others (a merge patch
// replaces lists, where server-side apply would merge a changed list with
// the shipped one).
func restorePolicies(ctx context.Context, t *testing.T) {
	objs, err := policies.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": o.Spec}}
		u.SetAPIVersion(admissionv1.SchemeGroupVersion.String())
		u.SetKind(o.Kind)
		u.SetName(o.Name)
		err := up.Create(ctx, u.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			err = up.Patch(ctx, u, client.Merge)
		}
		if err != nil {
			t.Fatalf("restoring %s: %v", o, err)
		}
	}
}

// waitReady waits for the controller's /readyz to pass.
func waitReady(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() error {
		if code, body := readyz(ctx, t); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s (%s)", code, body, shared.Admission.Problem())
		}
		return nil
	})
}

func TestAdmissionPolicies_MissingOrChangedGrantNothingUntilRestored(t *testing.T) {
	ctx := t.Context()
	waitReady(ctx, t, "the controller to be ready")
	// Events about the controller go to its namespace.
	if err := up.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultSystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ws := testenv.Namespace(t, up, "fleet-ws-")
	a := newAgent(t, ws, "tok", tokenWith(t, ws, "tok", fleet.ClusterRegistrationTokenSpec{}))

	t.Cleanup(func() {
		// The test's context has ended by now.
		restorePolicies(context.Background(), t)
		waitReady(context.Background(), t, "the controller to be ready again")
	})
	missing := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-clusterregistration-approval"}}
	if err := up.Delete(ctx, missing); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "/readyz to fail", func() error {
		code, body := readyz(ctx, t)
		if code != http.StatusInternalServerError || !strings.Contains(body, "[-]admission-policies failed") {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	waitObjectEvent(t, config.DefaultSystemNamespace, "ConfigMap", config.ConfigMapName, fleet.AdmissionPoliciesMissingReason,
		"not installed: ValidatingAdmissionPolicyBinding fleet-clusterregistration-approval")
	if !strings.Contains(logs.String(), "ValidatingAdmissionPolicyBinding fleet-clusterregistration-approval") {
		t.Error("the log does not name the missing binding")
	}

	reg := a.create(t, randomID("cid-"), nil)
	got := waitCondition(t, ws, reg.Name, metav1.ConditionFalse, fleet.AdmissionPoliciesMissingReason)
	if msg := got.Status.Conditions[0].Message; !strings.Contains(msg, "ValidatingAdmissionPolicyBinding fleet-clusterregistration-approval") {
		t.Errorf("message does not name the missing binding: %s", msg)
	}
	waitEvent(t, ws, reg.Name, fleet.AdmissionPoliciesMissingReason, "fleet-clusterregistration-approval")

	// A policy changed from what fleet ships counts too.
	weakened := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-clusterregistration-token"}}
	if err := up.Patch(ctx, weakened, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"validationActions":["Audit"]}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the registration to name the changed binding", func() error {
		c := meta.FindStatusCondition(getReg(t, ws, reg.Name).Status.Conditions, fleet.GrantedCondition)
		if c == nil || !strings.Contains(c.Message, "changed from what fleet ships: ValidatingAdmissionPolicyBinding fleet-clusterregistration-token (spec.validationActions[0])") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	time.Sleep(time.Second)
	nothingMadeFor(t, a, reg)
	if err := up.Get(ctx, client.ObjectKey{Namespace: ws, Name: names.AutoClusterName(reg.Spec.ClientID)}, &fleet.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Cluster was made while the policies were missing: %v", err)
	}

	// Restored: ready again, and the waiting registration is granted.
	restorePolicies(ctx, t)
	waitReady(ctx, t, "/readyz to pass")
	a.waitCredential(t, reg, 30*time.Second)
	waitCondition(t, ws, reg.Name, metav1.ConditionTrue, fleet.GrantedReason)
	waitObjectEvent(t, config.DefaultSystemNamespace, "ConfigMap", config.ConfigMapName, "AdmissionPoliciesInstalled", "registrations are granted")
}

// A controller whose identity may not read the admission policies cannot
// tell whether they are in force: it reports them as missing (so the grant
// waits) instead of waiting silently.
func TestAdmissionPolicies_UnreadableCountAsMissing(t *testing.T) {
	ws := testenv.Namespace(t, up, "fleet-ws-")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// An identity that may read nothing cluster-wide.
	if err := up.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "no-rbac"}}); err != nil {
		t.Fatal(err)
	}
	bearer, err := env.Upstream.ServiceAccountToken(ctx, ws, "no-rbac", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	remember(bearer)
	c, err := cache.New(env.Upstream.ConfigForToken(bearer), cache.Options{Scheme: controlplane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	checker, err := admission.New(c, admission.Options{UnreadAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Start(t, "cache", c.Start)
	testenv.Start(t, "admission checker", checker.Start)
	testenv.Eventually(t, 20*time.Second, "the checker to report that it cannot read the policies", func() error {
		if !checker.Checked() {
			return errors.New("not reported yet")
		}
		if err := checker.ReadyCheck(nil); err == nil || !strings.Contains(err.Error(), "needs get, list and watch on validatingadmissionpolicies") {
			return fmt.Errorf("ready check: %v", err)
		}
		return nil
	})
}
