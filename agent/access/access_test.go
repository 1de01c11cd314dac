package access

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gitops-fleet/fleet/dev/controlplane"
	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

var env *controlplane.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{ControlPlanes: &controlplane.Options{Downstreams: 1}}, func(s *testenv.Suite) error {
		env = s.Env
		return nil
	})
}

const audience = "fleet-default/c1"

// fixture is a handler in front of the downstream API server, reached over
// HTTP as the tunnel would deliver requests, and a signer whose key it
// trusts.
type fixture struct {
	t      *testing.T
	down   *controlplane.ControlPlane
	admin  kubernetes.Interface
	signer *assertion.Signer
	h      *Handler
	srv    *httptest.Server
	reg    *prometheus.Registry

	mu  sync.Mutex
	now time.Time // the handler's clock; zero: real time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if env == nil {
		t.Skip("no control planes while fuzzing")
	}
	f := &fixture{t: t, down: env.Downstreams[0], admin: env.Downstreams[0].Clientset}
	f.signer = newSigner(t)
	f.reg = prometheus.NewRegistry()
	// The local API server as an agent in a pod sees it: rest.InClusterConfig
	// gives a host without a path.
	local := rest.CopyConfig(f.down.Config)
	u, err := url.Parse(local.Host)
	if err != nil {
		t.Fatal(err)
	}
	local.Host = u.Scheme + "://" + u.Host
	h, err := New(Options{
		Audience:   audience,
		Verifier:   assertion.NewVerifier(assertion.NewKeySet(f.signer.PublicKey())),
		Local:      local,
		Now:        f.clock,
		Registerer: f.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now.IsZero() {
		return time.Now()
	}
	return f.now
}

func newSigner(t *testing.T) *assertion.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := assertion.NewSigner(k, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// asserting adds a fresh assertion of id to each request, as fleet-proxy.
type asserting struct {
	clock  func() time.Time
	signer *assertion.Signer
	id     assertion.Identity
	next   http.RoundTripper
}

func (a *asserting) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := a.signer.Sign(a.id, audience, a.clock())
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set(assertion.HeaderName, tok)
	return a.next.RoundTrip(req)
}

// as is a clientset that reaches the downstream through the handler as id.
func (f *fixture) as(id assertion.Identity) kubernetes.Interface {
	f.t.Helper()
	cfg := &rest.Config{Host: f.srv.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		return &asserting{clock: f.clock, signer: f.signer, id: id, next: rt}
	}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return cs
}

// raw sends one request through the handler with the given headers (and an
// assertion of id unless id.User is empty) and returns status and body.
func (f *fixture) raw(id assertion.Identity, method, path, body string, hdr http.Header) (int, string) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if id.User != "" {
		tok, err := f.signer.Sign(id, audience, f.clock())
		if err != nil {
			f.t.Fatal(err)
		}
		req.Header.Set(assertion.HeaderName, tok)
	}
	// As fleet-proxy, which refuses them: a redirect is an answer.
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirects.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// whoami is the user the downstream API server sees for a raw request.
func (f *fixture) whoami(id assertion.Identity, hdr http.Header) authenticationv1.UserInfo {
	f.t.Helper()
	code, body := f.raw(id, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, hdr)
	if code != http.StatusCreated {
		f.t.Fatalf("SelfSubjectReview: %d %s", code, body)
	}
	var ssr authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(body), &ssr); err != nil {
		f.t.Fatal(err)
	}
	return ssr.Status.UserInfo
}

// grant binds a Role allowing verbs on resources in ns to subject.
func (f *fixture) grant(ns string, subject rbacv1.Subject, resources []string, verbs ...string) {
	f.t.Helper()
	ctx := f.t.Context()
	name := strings.ToLower(strings.NewReplacer(":", "-").Replace(subject.Kind + "-" + subject.Name))
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: verbs}}}
	if _, err := f.admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	subject.APIGroup = rbacv1.GroupName
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{subject}}
	if _, err := f.admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) namespace(prefix string) string {
	return testenv.Namespace(f.t, f.down.Client, prefix)
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want forbidden, got %v", what, err)
	}
}

func TestUserBindingGrantsOneNamespace(t *testing.T) {
	f := newFixture(t)
	mine, other := f.namespace("alice-"), f.namespace("other-")
	f.grant(mine, rbacv1.Subject{Kind: "User", Name: "fleet:alice"}, []string{"pods"}, "get", "list")
	alice := f.as(assertion.Identity{User: "alice", UID: "u-1", Groups: []string{"system:authenticated", "devs"}})
	ctx := t.Context()

	if _, err := alice.CoreV1().Pods(mine).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing pods where alice may: %v", err)
	}
	_, err := alice.CoreV1().Pods(other).List(ctx, metav1.ListOptions{})
	forbidden(t, "listing pods elsewhere", err)
	_, err = alice.CoreV1().Secrets(mine).List(ctx, metav1.ListOptions{})
	forbidden(t, "listing secrets", err)

	got := f.whoami(assertion.Identity{User: "alice", UID: "u-1", Groups: []string{"devs"}}, nil)
	if got.Username != "fleet:alice" || got.UID != "u-1" || !slices.Contains(got.Groups, "fleet:devs") ||
		slices.Contains(got.Groups, "devs") {
		t.Errorf("downstream identity %+v", got)
	}
	// A user without a binding may not even list there.
	bob := f.as(assertion.Identity{User: "bob"})
	_, err = bob.CoreV1().Pods(mine).List(ctx, metav1.ListOptions{})
	forbidden(t, "bob listing pods", err)
}

// A GET is answered by the API server, not redirected by the handler (an
// in-cluster host has no path; fleet-proxy refuses redirects).
func TestGetIsServedNotRedirected(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/version", "/api", "/api/v1/namespaces/default"} {
		code, body := f.raw(assertion.Identity{User: "alice"}, http.MethodGet, path, "", nil)
		if code == http.StatusMovedPermanently || code == http.StatusFound || code >= 500 {
			t.Errorf("GET %s: %d %s; want the API server's answer", path, code, body)
		}
	}
}

// An upgrade (exec) after plain requests reaches the API server over
// HTTP/1.1: the plain requests' HTTP/2 must not leak into the upgrade's
// TLS handshake (the API server would read the upgrade as a bad HTTP/2
// preface and the handler answer 503).
func TestUpgradeAfterPlainRequestsReachesTheAPIServer(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("exec-")
	alice := assertion.Identity{User: "alice"}
	for range 3 {
		f.raw(alice, http.MethodGet, "/api/v1/namespaces/"+ns, "", nil)
	}
	f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:alice"}, []string{"pods/exec"}, "create", "get")
	code, body := f.raw(alice, http.MethodPost, "/api/v1/namespaces/"+ns+"/pods/nothere/exec?command=true&stdout=true", "", http.Header{
		"Connection":                {"Upgrade"},
		"Upgrade":                   {"SPDY/3.1"},
		"X-Stream-Protocol-Version": {"v4.channel.k8s.io"},
	})
	// No kubelet here: the API server's own answer for a pod that is not
	// there proves the upgrade reached it.
	if code != http.StatusNotFound {
		t.Errorf("exec upgrade: %d %s; want the API server's 404 for the missing pod", code, body)
	}
}

func TestGroupBinding(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("team-")
	f.grant(ns, rbacv1.Subject{Kind: "Group", Name: "fleet:team"}, []string{"pods"}, "list")
	ctx := t.Context()
	if _, err := f.as(assertion.Identity{User: "bob", Groups: []string{"team"}}).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a member of team: %v", err)
	}
	_, err := f.as(assertion.Identity{User: "carol", Groups: []string{"other"}}).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "not a member of team", err)
	// The upstream group name as is grants nothing downstream.
	ns2 := f.namespace("team-plain-")
	f.grant(ns2, rbacv1.Subject{Kind: "Group", Name: "team"}, []string{"pods"}, "list")
	_, err = f.as(assertion.Identity{User: "bob", Groups: []string{"team"}}).CoreV1().Pods(ns2).List(ctx, metav1.ListOptions{})
	forbidden(t, "binding to the unprefixed group", err)
}

func TestSystemMastersIsNotAdmin(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("masters-")
	id := assertion.Identity{User: "mallory", Groups: []string{"system:masters"}}
	cs := f.as(id)
	ctx := t.Context()
	_, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	forbidden(t, "listing pods", err)
	_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	forbidden(t, "listing namespaces", err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mallory-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "fleet:mallory"}},
	}, metav1.CreateOptions{})
	forbidden(t, "binding cluster-admin", err)
	got := f.whoami(id, nil)
	if slices.Contains(got.Groups, "system:masters") || !slices.Contains(got.Groups, "fleet:system:masters") {
		t.Errorf("groups downstream: %v", got.Groups)
	}
	// A system: user name keeps its prefix after fleet:.
	got = f.whoami(assertion.Identity{User: "system:serviceaccount:kube-system:default"}, nil)
	if got.Username != "fleet:system:serviceaccount:kube-system:default" {
		t.Errorf("user downstream: %q", got.Username)
	}
}

func TestImpersonationHeadersRefused(t *testing.T) {
	f := newFixture(t)
	alice := assertion.Identity{User: "alice"}
	for _, h := range []string{"Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-Scopes", "impersonate-user"} {
		hdr := http.Header{}
		hdr[h] = []string{"system:admin"}
		code, body := f.raw(alice, http.MethodGet, "/api/v1/namespaces", "", hdr)
		if code != http.StatusBadRequest || !strings.Contains(body, "impersonation headers") {
			t.Errorf("%s: %d %s", h, code, body)
		}
	}
}

func TestHeadersDoNotChangeTheIdentity(t *testing.T) {
	f := newFixture(t)
	id := assertion.Identity{User: "alice", UID: "u-1", Groups: []string{"devs"}}
	want := f.whoami(id, nil)
	for name, hdr := range map[string]http.Header{
		"Connection names the impersonation headers": {"Connection": {"Impersonate-User, Impersonate-Group, Impersonate-Uid, Authorization"}},
		"Connection names the assertion":             {"Connection": {assertion.HeaderName}},
		"X-Remote-User":                              {"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}},
		"X-Forwarded-For":                            {"X-Forwarded-For": {"10.0.0.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := f.whoami(id, hdr)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("identity changed (-want +got):\n%s", d)
			}
		})
	}
	// Another Authorization header is replaced, not added to.
	admin, err := f.down.ServiceAccountToken(t.Context(), "kube-system", "default", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.whoami(id, http.Header{"Authorization": {"Bearer " + admin}}); got.Username != "fleet:alice" {
		t.Errorf("with another bearer token: %q", got.Username)
	}
}

func TestImpersonatorAloneCanDoNothing(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("alone-")
	f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:alice"}, []string{"pods"}, "list")
	if _, err := f.as(assertion.Identity{User: "alice"}).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// The token the handler holds, and a new one for the same account.
	e := f.h.imp.entry("alice")
	e.mu.Lock()
	held := e.token
	e.mu.Unlock()
	fresh, err := f.down.ServiceAccountToken(t.Context(), Namespace, ImpersonatorName("alice"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"held": held, "fresh": fresh} {
		if tok == "" {
			t.Fatalf("%s: no token", name)
		}
		cs := kubernetes.NewForConfigOrDie(f.down.ConfigForToken(tok))
		_, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		forbidden(t, name+": listing pods", err)
		_, err = cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
		forbidden(t, name+": listing all pods", err)
		_, err = cs.CoreV1().Secrets(Namespace).List(t.Context(), metav1.ListOptions{})
		forbidden(t, name+": listing its own namespace's secrets", err)
		// Impersonating anyone else is refused too.
		cfg := f.down.ConfigForToken(tok)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "fleet:bob"}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		forbidden(t, name+": impersonating fleet:bob", err)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "fleet:alice", Groups: []string{"system:masters"}}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		forbidden(t, name+": impersonating fleet:alice in system:masters", err)
	}
}

func TestBadAssertionsRefused(t *testing.T) {
	f := newFixture(t)
	alice := assertion.Identity{User: "alice"}
	now := time.Now()
	sign := func(s *assertion.Signer, aud string, at time.Time) string {
		tok, err := s.Sign(alice, aud, at)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	replayed := sign(f.signer, audience, now)
	if code, body := f.raw(assertion.Identity{}, http.MethodGet, "/api", "", http.Header{assertion.HeaderName: {replayed}}); code != http.StatusOK {
		t.Fatalf("first use: %d %s", code, body)
	}
	for name, tok := range map[string]string{
		"none":           "",
		"garbage":        "not-a-jws",
		"other key":      sign(newSigner(t), audience, now),
		"expired":        sign(f.signer, audience, now.Add(-2*time.Minute)),
		"other audience": sign(f.signer, "fleet-default/c2", now),
		"replayed":       replayed,
	} {
		code, body := f.raw(assertion.Identity{}, http.MethodGet, "/api/v1/namespaces", "", http.Header{assertion.HeaderName: {tok}})
		if code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, code, body)
		}
		if tok != "" && strings.Contains(body, tok) {
			t.Errorf("%s: the answer contains the assertion", name)
		}
	}
}

func TestImpersonatorObjects(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	user := "oidc:alice@example.com"
	extra := map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}, "scopes": {"x"}}
	id := assertion.Identity{User: user, UID: "u-9", Groups: []string{"b", "a"}, Extra: extra}
	got := f.whoami(id, nil)
	if got.Extra["authentication.kubernetes.io/credential-id"][0] != "JTI=1" || got.Extra["scopes"] != nil {
		t.Errorf("extras downstream: %v", got.Extra)
	}
	name := ImpersonatorName(user)
	if len(name) != len(NamePrefix)+20 || strings.ToLower(name) != name {
		t.Errorf("name %q", name)
	}
	cr, err := f.admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{
		{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"fleet:" + user}},
		{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"fleet:a", "fleet:b"}},
		{Verbs: []string{"impersonate"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"uids"}, ResourceNames: []string{"u-9"}},
		{Verbs: []string{"impersonate"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"userextras/authentication.kubernetes.io/credential-id"}, ResourceNames: []string{"JTI=1"}},
	}
	if d := cmp.Diff(want, cr.Rules); d != "" {
		t.Errorf("rules (-want +got):\n%s", d)
	}
	if cr.Annotations[AnnotationImpersonates] != user || cr.Annotations[AnnotationLastUsed] == "" {
		t.Errorf("annotations %v", cr.Annotations)
	}
	sa, err := f.admin.CoreV1().ServiceAccounts(Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crb, err := f.admin.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for kind, refs := range map[string][]metav1.OwnerReference{"ServiceAccount": sa.OwnerReferences, "ClusterRoleBinding": crb.OwnerReferences} {
		if len(refs) != 1 || refs[0].UID != cr.UID || refs[0].Kind != "ClusterRole" {
			t.Errorf("%s owners %+v", kind, refs)
		}
	}
	if crb.RoleRef.Name != name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != name || crb.Subjects[0].Namespace != Namespace {
		t.Errorf("binding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	for _, mf := range cr.ManagedFields {
		if mf.Manager != FieldOwner {
			t.Errorf("ClusterRole field manager %q", mf.Manager)
		}
	}

	// The groups change: the rules follow, and the new group works.
	ns := f.namespace("newgroup-")
	f.grant(ns, rbacv1.Subject{Kind: "Group", Name: "fleet:c"}, []string{"pods"}, "list")
	id.Groups = []string{"c"}
	if _, err := f.as(id).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing as a member of the new group: %v", err)
	}
	cr, err = f.admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"groups"}) && slices.Equal(r.ResourceNames, []string{"fleet:c"})
	}) {
		t.Errorf("rules after the group change: %+v", cr.Rules)
	}

	// No token Secret, ever.
	secrets, err := f.admin.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets in %s", len(secrets.Items), Namespace)
	}
}

func TestWatchStreams(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("watch-")
	f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:alice"}, []string{"configmaps"}, "list", "watch")
	w, err := f.as(assertion.Identity{User: "alice"}).CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := map[string]bool{}
	next := func(want string) func() error {
		return func() error {
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						return errNotSeen(want + " (the watch ended)")
					}
					if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added {
						seen[cm.Name] = true
					}
				default:
					if seen[want] {
						return nil
					}
					return errNotSeen(want)
				}
			}
		}
	}
	// Two objects created one after the other arrive on the open watch.
	for _, name := range []string{"one", "two"} {
		if _, err := f.admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the watch to stream "+name, next(name))
	}
}

type errNotSeen string

func (e errNotSeen) Error() string { return "no ADDED event for " + string(e) + " yet" }

func TestGarbageCollection(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.whoami(assertion.Identity{User: "dave"}, nil)
	f.whoami(assertion.Identity{User: "erin"}, nil)
	dave, erin := ImpersonatorName("dave"), ImpersonatorName("erin")

	// Eight days later erin is used again, dave is not.
	f.mu.Lock()
	f.now = time.Now().Add(8 * 24 * time.Hour)
	f.mu.Unlock()
	f.whoami(assertion.Identity{User: "erin"}, nil)
	n, err := f.h.CollectGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("collected %d", n)
	}
	if _, err := f.admin.RbacV1().ClusterRoles().Get(ctx, erin, metav1.GetOptions{}); err != nil {
		t.Errorf("erin's impersonator: %v", err)
	}
	if _, err := f.admin.RbacV1().ClusterRoles().Get(ctx, dave, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dave's ClusterRole: %v", err)
	}
	testenv.Eventually(t, time.Minute, "the garbage collector to remove dave's ServiceAccount and binding", func() error {
		if _, err := f.admin.CoreV1().ServiceAccounts(Namespace).Get(ctx, dave, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errNotSeen("ServiceAccount deletion")
		}
		if _, err := f.admin.RbacV1().ClusterRoleBindings().Get(ctx, dave, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errNotSeen("ClusterRoleBinding deletion")
		}
		return nil
	})
	// dave comes back: everything is made again.
	f.whoami(assertion.Identity{User: "dave"}, nil)
	if _, err := f.admin.CoreV1().ServiceAccounts(Namespace).Get(ctx, dave, metav1.GetOptions{}); err != nil {
		t.Errorf("dave's ServiceAccount again: %v", err)
	}
}

// TestConcurrentFirstRequests: many first requests of one user at once are
// served by one impersonator made once (single-flight per user).
func TestConcurrentFirstRequests(t *testing.T) {
	f := newFixture(t)
	ns := f.namespace("burst-")
	f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:frank"}, []string{"pods"}, "list")
	cs := f.as(assertion.Identity{User: "frank", Groups: []string{"g1"}})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	crs, err := f.admin.RbacV1().ClusterRoles().List(t.Context(), metav1.ListOptions{LabelSelector: LabelImpersonator + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cr := range crs.Items {
		if cr.Annotations[AnnotationImpersonates] == "frank" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d impersonators of frank", n)
	}
	f.h.imp.mu.Lock()
	entries := len(f.h.imp.entries)
	f.h.imp.mu.Unlock()
	if entries != 1 {
		t.Errorf("%d cached impersonators", entries)
	}
}

// TestTokenRenewedAt80Percent: the impersonator's token (1 h) is reused
// until 80 % of its life and then asked for again; the request path keeps
// working across the renewal.
func TestTokenRenewedAt80Percent(t *testing.T) {
	f := newFixture(t)
	start := time.Now()
	at := func(d time.Duration) string {
		f.mu.Lock()
		f.now = start.Add(d)
		f.mu.Unlock()
		if got := f.whoami(assertion.Identity{User: "gina"}, nil); got.Username != "fleet:gina" {
			t.Fatalf("at %s: %q", d, got.Username)
		}
		e := f.h.imp.entry("gina")
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.token
	}
	first := at(0)
	if again := at(47 * time.Minute); again != first {
		t.Error("the token was renewed before 80 % of its life")
	}
	if renewed := at(49 * time.Minute); renewed == first {
		t.Error("the token was not renewed after 80 % of its life")
	}
}

// TestDeletedImpersonatorIsMadeAgain: someone deletes the impersonator's
// ServiceAccount; the request that finds its token rejected fails, and the
// next one is served by an impersonator made again.
func TestDeletedImpersonatorIsMadeAgain(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	hank := assertion.Identity{User: "hank"}
	f.whoami(hank, nil)
	name := ImpersonatorName("hank")
	if err := f.admin.CoreV1().ServiceAccounts(Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ssr := func() (int, string) {
		return f.raw(hank, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`, nil)
	}
	// The API server notices the deletion soon (its ServiceAccount lookup).
	testenv.Eventually(t, 30*time.Second, "the deleted ServiceAccount's token to be rejected", func() error {
		if code, body := ssr(); code != http.StatusUnauthorized {
			return errNotSeen(fmt.Sprintf("rejection (got %d %s)", code, body))
		}
		return nil
	})
	if code, body := ssr(); code != http.StatusCreated {
		t.Errorf("the request after the rejection: %d %s", code, body)
	}
	if _, err := f.admin.CoreV1().ServiceAccounts(Namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("the ServiceAccount again: %v", err)
	}
}

// The impersonator cache's metrics count users and TokenRequests and
// never name a user.
func TestImpersonatorMetrics(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	ns := f.namespace("metrics-")
	for _, u := range []string{"erin", "frank"} {
		f.grant(ns, rbacv1.Subject{Kind: "User", Name: "fleet:" + u}, []string{"pods"}, "list")
		for range 2 {
			if _, err := f.as(assertion.Identity{User: u}).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatalf("%s lists pods: %v", u, err)
			}
		}
	}
	want := `
# HELP fleet_agent_impersonator_token_requests_total TokenRequests made for impersonators' ServiceAccounts, by result (success, error).
# TYPE fleet_agent_impersonator_token_requests_total counter
fleet_agent_impersonator_token_requests_total{result="success"} 2
# HELP fleet_agent_impersonators Impersonators (one per upstream user) this agent process knows: made or used since it started.
# TYPE fleet_agent_impersonators gauge
fleet_agent_impersonators 2
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "fleet_agent_impersonators", "fleet_agent_impersonator_token_requests_total"); err != nil {
		t.Error(err)
	}
}
