package access

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// lastUsedEvery bounds how often last-used is written.
	lastUsedEvery = time.Hour
	// recheckEvery is how often the objects of a cached impersonator are
	// applied again (someone may have deleted them).
	recheckEvery = 10 * time.Minute
	// authorizeWait bounds the wait for new RBAC to reach the authorizer.
	authorizeWait = 5 * time.Second
)

// impersonators keeps the per-user impersonators downstream: their
// objects, cache-first and single-flight per user, and their tokens, in
// memory only.
type impersonators struct {
	cs        kubernetes.Interface
	namespace string
	tokenTTL  time.Duration
	now       func() time.Time
	log       logr.Logger
	metrics   *metrics

	mu      sync.Mutex
	entries map[string]*entry // by upstream user name
	nsOnce  bool
}

// entry is one user's impersonator as this process knows it. Its mutex
// makes the work for one user single-flight.
type entry struct {
	mu         sync.Mutex
	name       string
	rulesHash  string
	appliedAt  time.Time
	token      string
	renewAt    time.Time
	lastUsedAt time.Time // what was last written to the annotation
}

func (m *impersonators) entry(user string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[user]
	if !ok {
		e = &entry{name: ImpersonatorName(user)}
		m.entries[user] = e
	}
	return e
}

func (m *impersonators) forget(user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, user)
}

// invalidate forgets the objects and token of user's impersonator if the
// token is still token (the API server rejected it: the ServiceAccount was
// deleted or made again), so the next request applies and asks again.
func (m *impersonators) invalidate(user, token string) {
	e := m.entry(user)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token == token {
		e.token, e.rulesHash = "", ""
	}
}

// token returns a bearer token of the impersonator of user, able to
// impersonate exactly d, making or updating its objects as needed.
func (m *impersonators) token(ctx context.Context, user string, d Downstream) (string, error) {
	e := m.entry(user)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := m.now()
	hash := d.rulesHash()
	if e.rulesHash != hash || now.Sub(e.appliedAt) > recheckEvery {
		if err := m.apply(ctx, e.name, user, d, now); err != nil {
			e.rulesHash = ""
			// The namespace may be gone: apply it again next time.
			m.mu.Lock()
			m.nsOnce = false
			m.mu.Unlock()
			return "", err
		}
		e.rulesHash, e.appliedAt, e.lastUsedAt = hash, now, now
		m.awaitAuthorized(ctx, e.name, d)
	}
	if e.token == "" || !now.Before(e.renewAt) {
		tok, renewAt, err := m.requestToken(ctx, e.name, now)
		if err != nil {
			return "", err
		}
		e.token, e.renewAt = tok, renewAt
	}
	if now.Sub(e.lastUsedAt) >= lastUsedEvery {
		if err := m.touch(ctx, e.name, now); err != nil {
			// Not worth failing the request: the next one tries again.
			m.log.Error(err, "recording when the impersonator was last used", "impersonator", e.name)
		} else {
			e.lastUsedAt = now
		}
	}
	return e.token, nil
}

// apply writes the namespace, the ClusterRole, and the ServiceAccount and
// ClusterRoleBinding it owns, by server-side apply under FieldOwner.
func (m *impersonators) apply(ctx context.Context, name, user string, d Downstream, now time.Time) error {
	opts := metav1.ApplyOptions{FieldManager: FieldOwner, Force: true}
	m.mu.Lock()
	nsDone := m.nsOnce
	m.mu.Unlock()
	if !nsDone {
		if _, err := m.cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(m.namespace).
			WithLabels(map[string]string{LabelImpersonator: "true"}), opts); err != nil {
			return fmt.Errorf("applying namespace %s: %w", m.namespace, err)
		}
		m.mu.Lock()
		m.nsOnce = true
		m.mu.Unlock()
	}
	labels := map[string]string{LabelImpersonator: "true"}
	annotations := map[string]string{AnnotationImpersonates: user, AnnotationLastUsed: now.UTC().Format(time.RFC3339)}

	role := rbacv1ac.ClusterRole(name).WithLabels(labels).WithAnnotations(annotations)
	for _, r := range d.Rules() {
		role.WithRules(rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).
			WithVerbs(r.Verbs...).WithResourceNames(r.ResourceNames...))
	}
	cr, err := m.cs.RbacV1().ClusterRoles().Apply(ctx, role, opts)
	if err != nil {
		return fmt.Errorf("applying ClusterRole %s: %w", name, err)
	}
	owner := metav1ac.OwnerReference().WithAPIVersion("rbac.authorization.k8s.io/v1").WithKind("ClusterRole").
		WithName(cr.Name).WithUID(cr.UID).WithBlockOwnerDeletion(false)
	ownAnnotations := map[string]string{AnnotationImpersonates: user}

	sa := corev1ac.ServiceAccount(name, m.namespace).WithLabels(labels).WithAnnotations(ownAnnotations).
		WithOwnerReferences(owner).WithAutomountServiceAccountToken(false)
	if _, err := m.cs.CoreV1().ServiceAccounts(m.namespace).Apply(ctx, sa, opts); err != nil {
		return fmt.Errorf("applying ServiceAccount %s/%s: %w", m.namespace, name, err)
	}
	crb := rbacv1ac.ClusterRoleBinding(name).WithLabels(labels).WithAnnotations(ownAnnotations).
		WithOwnerReferences(owner).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(name)).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(name).WithNamespace(m.namespace))
	if _, err := m.cs.RbacV1().ClusterRoleBindings().Apply(ctx, crb, opts); err != nil {
		return fmt.Errorf("applying ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// awaitAuthorized waits, at most authorizeWait, until the API server's
// authorizer allows the impersonator every rule just applied. RBAC is read
// from an informer: the first request right after the ClusterRoleBinding
// is made may otherwise be refused with "cannot impersonate" (seen on a
// loaded machine). It checks one name per rule, by SubjectAccessReview as
// the impersonator; on timeout the request goes on and the API server says
// what it says.
func (m *impersonators) awaitAuthorized(ctx context.Context, name string, d Downstream) {
	sa := serviceaccount.MakeUsername(m.namespace, name)
	pending := d.Rules()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, authorizeWait, true, func(ctx context.Context) (bool, error) {
		for len(pending) > 0 {
			r := pending[0]
			sar, err := m.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: "impersonate", Group: r.APIGroups[0], Resource: r.Resources[0], Name: r.ResourceNames[len(r.ResourceNames)-1],
				}},
			}, metav1.CreateOptions{})
			if err != nil || !sar.Status.Allowed {
				return false, nil
			}
			pending = pending[1:]
		}
		return true, nil
	})
	if err != nil {
		m.log.Info("the impersonator's permissions are not visible to the authorizer yet; going on", "impersonator", name, "waited", authorizeWait)
	}
}

// requestToken asks the TokenRequest API for a token of the impersonator's
// ServiceAccount; it is renewed at 80 % of its life. No Secret is made.
func (m *impersonators) requestToken(ctx context.Context, name string, now time.Time) (string, time.Time, error) {
	tr, err := m.cs.CoreV1().ServiceAccounts(m.namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(m.tokenTTL / time.Second))},
	}, metav1.CreateOptions{})
	if m.metrics != nil {
		m.metrics.tokenRequests.WithLabelValues(result(err)).Inc()
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", m.namespace, name, err)
	}
	life := tr.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 || life > m.tokenTTL {
		life = m.tokenTTL
	}
	return tr.Status.Token, now.Add(life * 8 / 10), nil
}

// touch writes last-used on the ClusterRole.
func (m *impersonators) touch(ctx context.Context, name string, now time.Time) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationLastUsed, now.UTC().Format(time.RFC3339))
	_, err := m.cs.RbacV1().ClusterRoles().Patch(ctx, name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: FieldOwner})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// collect deletes the impersonators whose last use is older than unusedFor
// (the ClusterRole; the garbage collector removes what it owns) and returns
// how many it deleted.
func (m *impersonators) collect(ctx context.Context, unusedFor time.Duration) (int, error) {
	list, err := m.cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: LabelImpersonator + "=true"})
	if err != nil {
		return 0, fmt.Errorf("listing impersonators: %w", err)
	}
	now := m.now()
	n := 0
	for _, cr := range list.Items {
		last := cr.CreationTimestamp.Time
		if t, err := time.Parse(time.RFC3339, cr.Annotations[AnnotationLastUsed]); err == nil {
			last = t
		}
		if now.Sub(last) < unusedFor {
			continue
		}
		user := cr.Annotations[AnnotationImpersonates]
		// Hold the user's entry so no request uses it while it goes.
		e := m.entry(user)
		e.mu.Lock()
		err := m.cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &cr.UID, ResourceVersion: &cr.ResourceVersion},
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		})
		if err == nil || apierrors.IsNotFound(err) {
			m.forget(user)
			n++
			if m.metrics != nil {
				m.metrics.collected.Inc()
			}
		}
		e.mu.Unlock()
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("deleting impersonator %s: %w", cr.Name, err)
		}
	}
	return n, nil
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}
