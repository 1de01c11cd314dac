// Package restriction decides whether a GitRepo may be used as written: the
// GitRepoRestrictions of its namespace (Fleet's meaning, merged as Fleet
// merges several) and the controller configuration's own rule on
// insecureSkipTLSVerify. It returns the settings the GitRepo takes effect
// with (defaults filled in), or a refusal that names each field, the value
// and what is allowed. A pure function: the caller lists the restrictions.
package restriction

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Options are the controller configuration's settings that bear on
// GitRepos.
type Options struct {
	// AllowInsecureSkipTLSVerify is the configuration's
	// allowGitInsecureSkipTLSVerify: without it a GitRepo that sets
	// insecureSkipTLSVerify is refused.
	AllowInsecureSkipTLSVerify bool
}

// Effective is what a GitRepo takes effect with once its namespace's
// restrictions allowed it. The GitRepo itself is not changed (Fleet writes
// the defaults into the spec; here a GitOps tool applying the GitRepo would
// fight that write).
type Effective struct {
	// ServiceAccount is spec.serviceAccount, else the restrictions'
	// defaultServiceAccount; empty: the agent's own identity.
	ServiceAccount string
	// ClientSecretName is spec.clientSecretName, else the restrictions'
	// defaultClientSecretName; empty: no git credentials.
	ClientSecretName string
	// TargetNamespace is spec.targetNamespace.
	TargetNamespace string
	// AllowedTargetNamespaceSelector is every restriction's
	// allowedTargetNamespaceSelector (all must match), for the Bundles'
	// allowedTargetNamespaceSelector; nil: none.
	AllowedTargetNamespaceSelector *metav1.LabelSelector
	// Restrictions are the names of the GitRepoRestrictions that applied,
	// sorted.
	Restrictions []string
}

// Problem is one reason a GitRepo is refused.
type Problem struct {
	// Reason is fleet.RestrictionRefusedReason,
	// fleet.RestrictionInvalidReason or
	// fleet.InsecureSkipTLSVerifyRefusedReason.
	Reason string
	// Field is the path of the value at fault: "spec.repo" of the GitRepo,
	// or "allowedRepoPatterns[1]" of the restriction Restriction.
	Field string
	// Restriction names the GitRepoRestriction at fault, for
	// RestrictionInvalid.
	Restriction string
	// Message says what is wrong and what to change.
	Message string
}

// Refusal is why a GitRepo is not accepted: every problem found, the most
// fundamental first (a restriction that cannot be used, then the
// configuration's rule, then the restrictions' rules in the order of
// targetNamespace, serviceAccount, repo, clientSecretName).
type Refusal struct {
	Problems []Problem
}

// Reason is the reason of the first problem, for the Accepted and Stalled
// conditions.
func (r *Refusal) Reason() string { return r.Problems[0].Reason }

func (r *Refusal) Error() string {
	msgs := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		msgs[i] = p.Message
	}
	return strings.Join(msgs, "; ")
}

// merged is the restrictions of one namespace taken together, as Fleet takes
// them: in name order, the first default that is set wins; the allow-lists
// add up (a value is allowed when any restriction lists it; a list that one
// restriction leaves empty does not lift another's); the namespace selectors
// must all match.
type merged struct {
	names                          []string
	defaultServiceAccount          string
	defaultClientSecretName        string
	allowedServiceAccounts         []string
	allowedClientSecretNames       []string
	allowedTargetNamespaces        []string
	allowedTargetNamespaceSelector *metav1.LabelSelector
	// repoPatterns are the allowedRepoPatterns as written, and compiled
	// (anchored) in the same order.
	repoPatterns []string
	repoRegexps  []*regexp.Regexp
}

// Evaluate decides whether repo may be used under the GitRepoRestrictions
// of its namespace and the configuration's options. Restrictions of other
// namespaces are ignored. The error is a *Refusal.
func Evaluate(repo *fleet.GitRepo, restrictions []fleet.GitRepoRestriction, opts Options) (Effective, error) {
	m, problems := merge(repo.Namespace, restrictions)
	spec := &repo.Spec
	if spec.InsecureSkipTLSverify && !opts.AllowInsecureSkipTLSVerify {
		problems = append(problems, Problem{
			Reason: fleet.InsecureSkipTLSVerifyRefusedReason, Field: "spec.insecureSkipTLSVerify",
			Message: "spec.insecureSkipTLSVerify is true, which the controller configuration does not allow: " +
				"give the git server's CA in spec.caBundle instead (or an administrator sets allowGitInsecureSkipTLSVerify)",
		})
	}
	eff := Effective{
		ServiceAccount:                 cmp.Or(spec.ServiceAccount, m.defaultServiceAccount),
		ClientSecretName:               cmp.Or(spec.ClientSecretName, m.defaultClientSecretName),
		TargetNamespace:                spec.TargetNamespace,
		AllowedTargetNamespaceSelector: m.allowedTargetNamespaceSelector,
		Restrictions:                   m.names,
	}
	refuse := func(field, format string, args ...any) {
		problems = append(problems, Problem{Reason: fleet.RestrictionRefusedReason, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	by, byAllow := "GitRepoRestriction "+strings.Join(m.names, ", "), ""
	if len(m.names) > 1 {
		by = "GitRepoRestrictions " + strings.Join(m.names, ", ")
		byAllow = by + " allow"
	} else {
		byAllow = by + " allows"
	}

	switch {
	case eff.TargetNamespace == "" && len(m.allowedTargetNamespaces) > 0:
		refuse("spec.targetNamespace", "spec.targetNamespace is not set, and %s only the target namespaces %s: set spec.targetNamespace to one of them",
			byAllow, list(m.allowedTargetNamespaces))
	case eff.TargetNamespace == "" && m.allowedTargetNamespaceSelector != nil:
		refuse("spec.targetNamespace", "spec.targetNamespace is not set, and %s only target namespaces labelled %s downstream: set spec.targetNamespace",
			byAllow, metav1.FormatLabelSelector(m.allowedTargetNamespaceSelector))
	case eff.TargetNamespace != "" && len(m.allowedTargetNamespaces) > 0 && !slices.Contains(m.allowedTargetNamespaces, eff.TargetNamespace):
		refuse("spec.targetNamespace", "spec.targetNamespace %q is not allowed by %s: use one of %s",
			eff.TargetNamespace, by, list(m.allowedTargetNamespaces))
	}

	if len(m.allowedServiceAccounts) > 0 {
		switch {
		case eff.ServiceAccount == "":
			// Fleet lets an empty serviceAccount through, so the agent's
			// own identity deploys, which is what the list is there to
			// prevent.
			refuse("spec.serviceAccount", "spec.serviceAccount is not set and no GitRepoRestriction gives a defaultServiceAccount, so the agent's own identity would deploy; %s only the service accounts %s: set spec.serviceAccount to one of them",
				byAllow, list(m.allowedServiceAccounts))
		case !slices.Contains(m.allowedServiceAccounts, eff.ServiceAccount):
			refuse(source("spec.serviceAccount", spec.ServiceAccount), "%s %q is not allowed by %s: use one of %s",
				source("spec.serviceAccount", spec.ServiceAccount), eff.ServiceAccount, by, list(m.allowedServiceAccounts))
		}
	}

	if len(m.repoPatterns) > 0 && !repoAllowed(spec.Repo, m) {
		refuse("spec.repo", "spec.repo %q matches none of the allowedRepoPatterns of %s (%s), each matched against the whole URL: use a repository they allow, or ask for a pattern that allows it",
			RedactURL(spec.Repo), by, list(m.repoPatterns))
	}

	if eff.ClientSecretName != "" && len(m.allowedClientSecretNames) > 0 && !slices.Contains(m.allowedClientSecretNames, eff.ClientSecretName) {
		refuse(source("spec.clientSecretName", spec.ClientSecretName), "%s %q is not allowed by %s: use one of %s",
			source("spec.clientSecretName", spec.ClientSecretName), eff.ClientSecretName, by, list(m.allowedClientSecretNames))
	}

	if len(problems) > 0 {
		return Effective{}, &Refusal{Problems: problems}
	}
	return eff, nil
}

// RedactURL is a repository URL fit for a message, a log or an event: the
// user information of a URL with a scheme (https://user:token@host/...,
// where a token may stand as the user) is replaced by "***". A URL in
// scp form (git@host:path) names only the ssh user and is kept.
func RedactURL(repo string) string {
	scheme, rest, ok := strings.Cut(repo, "://")
	if !ok {
		return repo
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return repo
	}
	out := scheme + "://***@" + authority[at+1:]
	if hasPath {
		out += "/" + path
	}
	return out
}

// source names where a value came from: the GitRepo's field, or the
// restrictions' default when the GitRepo left it empty.
func source(field, set string) string {
	if set != "" {
		return field
	}
	switch field {
	case "spec.serviceAccount":
		return "defaultServiceAccount"
	case "spec.clientSecretName":
		return "defaultClientSecretName"
	}
	return field
}

// repoAllowed: a pattern equal to the URL allows it (Fleet's verbatim
// match, for lists of plain URLs), and so does a pattern matching the whole
// URL.
func repoAllowed(repo string, m merged) bool {
	for i, p := range m.repoPatterns {
		if p == repo || m.repoRegexps[i].MatchString(repo) {
			return true
		}
	}
	return false
}

// merge takes the restrictions of namespace together; problems are the
// restrictions' values that cannot be used.
func merge(namespace string, restrictions []fleet.GitRepoRestriction) (merged, []Problem) {
	var own []*fleet.GitRepoRestriction
	for i := range restrictions {
		if restrictions[i].Namespace == namespace {
			own = append(own, &restrictions[i])
		}
	}
	slices.SortFunc(own, func(a, b *fleet.GitRepoRestriction) int { return strings.Compare(a.Name, b.Name) })

	var m merged
	var problems []Problem
	for _, r := range own {
		m.names = append(m.names, r.Name)
		m.defaultServiceAccount = cmp.Or(m.defaultServiceAccount, r.DefaultServiceAccount)
		m.defaultClientSecretName = cmp.Or(m.defaultClientSecretName, r.DefaultClientSecretName)
		m.allowedServiceAccounts = append(m.allowedServiceAccounts, r.AllowedServiceAccounts...)
		m.allowedClientSecretNames = append(m.allowedClientSecretNames, r.AllowedClientSecretNames...)
		m.allowedTargetNamespaces = append(m.allowedTargetNamespaces, r.AllowedTargetNamespaces...)
		for i, p := range r.AllowedRepoPatterns {
			re, err := regexp.Compile(`^(?:` + p + `)$`)
			if err != nil {
				problems = append(problems, Problem{
					Reason: fleet.RestrictionInvalidReason, Restriction: r.Name, Field: fmt.Sprintf("allowedRepoPatterns[%d]", i),
					Message: fmt.Sprintf("GitRepoRestriction %s: allowedRepoPatterns[%d] %q is not a regular expression (%v): fix it; until then no GitRepo of the namespace is accepted",
						r.Name, i, p, regexpError(err)),
				})
				continue
			}
			m.repoPatterns = append(m.repoPatterns, p)
			m.repoRegexps = append(m.repoRegexps, re)
		}
		if sel := r.AllowedTargetNamespaceSelector; sel != nil {
			if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
				problems = append(problems, Problem{
					Reason: fleet.RestrictionInvalidReason, Restriction: r.Name, Field: "allowedTargetNamespaceSelector",
					Message: fmt.Sprintf("GitRepoRestriction %s: allowedTargetNamespaceSelector is not a valid label selector (%v): fix it; until then no GitRepo of the namespace is accepted", r.Name, err),
				})
				continue
			}
			m.allowedTargetNamespaceSelector = and(m.allowedTargetNamespaceSelector, sel)
		}
	}
	return m, problems
}

// and is a selector that matches what both a and b match. Fleet merges
// matchLabels key by key, the later value replacing the earlier, which
// drops a restriction's requirement; here a second value of the same key is
// kept as an expression, so the selectors of two restrictions that disagree
// match no namespace.
func and(a, b *metav1.LabelSelector) *metav1.LabelSelector {
	if a == nil {
		return b.DeepCopy()
	}
	out := a.DeepCopy()
	for _, k := range sortedKeys(b.MatchLabels) {
		v := b.MatchLabels[k]
		switch have, ok := out.MatchLabels[k]; {
		case !ok:
			if out.MatchLabels == nil {
				out.MatchLabels = map[string]string{}
			}
			out.MatchLabels[k] = v
		case have != v:
			out.MatchExpressions = appendRequirement(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	for _, e := range b.MatchExpressions {
		out.MatchExpressions = appendRequirement(out.MatchExpressions, e)
	}
	return out
}

func appendRequirement(reqs []metav1.LabelSelectorRequirement, r metav1.LabelSelectorRequirement) []metav1.LabelSelectorRequirement {
	for _, have := range reqs {
		if have.Key == r.Key && have.Operator == r.Operator && slices.Equal(have.Values, r.Values) {
			return reqs
		}
	}
	return append(reqs, *r.DeepCopy())
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// list quotes values for a message: ["a" "b"].
func list(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// regexpError is what is wrong with a pattern, without the anchoring this
// package adds around it.
func regexpError(err error) string {
	var re *syntax.Error
	if errors.As(err, &re) {
		return re.Code.String()
	}
	return err.Error()
}
