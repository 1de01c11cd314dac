package restriction

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

const ns = "fleet-default"

func gitRepo(mod func(*fleet.GitRepoSpec)) *fleet.GitRepo {
	r := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apps"},
		Spec:       fleet.GitRepoSpec{Repo: "https://github.com/example/apps"},
	}
	if mod != nil {
		mod(&r.Spec)
	}
	return r
}

func restriction(name string, mod func(*fleet.GitRepoRestriction)) fleet.GitRepoRestriction {
	r := fleet.GitRepoRestriction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mod != nil {
		mod(&r)
	}
	return r
}

// refusal is what a test expects of a refusal: the reasons and fields of
// its problems, in order, and words each message must hold.
type refusal struct {
	reasons []string
	fields  []string
	words   []string
}

// TestEvaluate: the effective settings of a GitRepo, or its refusal, under
// the GitRepoRestrictions of its namespace and the configuration, with
// Fleet's meaning (defaults, allow-lists, repository patterns, target
// namespaces, several restrictions together) and fleet's stricter rules
// (anchored patterns, a service account required by an allow-list,
// insecureSkipTLSVerify only when the configuration allows it).
func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name         string
		repo         *fleet.GitRepo
		restrictions []fleet.GitRepoRestriction
		opts         Options
		want         Effective
		refused      *refusal
	}{
		{
			name: "no restriction: the GitRepo as written",
			repo: gitRepo(func(s *fleet.GitRepoSpec) {
				s.ServiceAccount, s.ClientSecretName, s.TargetNamespace = "deployer", "git-auth", "apps"
			}),
			want: Effective{ServiceAccount: "deployer", ClientSecretName: "git-auth", TargetNamespace: "apps"},
		},
		{
			name: "defaults fill what the GitRepo leaves empty",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.DefaultServiceAccount, r.DefaultClientSecretName = "restricted", "org-token"
			})},
			want: Effective{ServiceAccount: "restricted", ClientSecretName: "org-token", Restrictions: []string{"r"}},
		},
		{
			name: "the GitRepo's own values win over defaults",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount, s.ClientSecretName = "mine", "my-auth" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.DefaultServiceAccount, r.DefaultClientSecretName = "restricted", "org-token"
			})},
			want: Effective{ServiceAccount: "mine", ClientSecretName: "my-auth", Restrictions: []string{"r"}},
		},
		{
			name: "several restrictions: the first default by name wins",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{
				restriction("zz", func(r *fleet.GitRepoRestriction) {
					r.DefaultServiceAccount, r.DefaultClientSecretName = "z-sa", "z-secret"
				}),
				restriction("aa", func(r *fleet.GitRepoRestriction) { r.DefaultClientSecretName = "a-secret" }),
			},
			want: Effective{ServiceAccount: "z-sa", ClientSecretName: "a-secret", Restrictions: []string{"aa", "zz"}},
		},
		{
			name:         "a service account in the allow-list",
			repo:         gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount = "deployer" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"deployer", "ops"} })},
			want:         Effective{ServiceAccount: "deployer", Restrictions: []string{"r"}},
		},
		{
			name:         "a service account outside the allow-list is refused",
			repo:         gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount = "cluster-admin" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"deployer"} })},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.serviceAccount"},
				words: []string{`"cluster-admin"`, "GitRepoRestriction r", `["deployer"]`}},
		},
		{
			// Fleet accepts it, and the agent's own identity deploys.
			name:         "no service account while an allow-list exists is refused",
			repo:         gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"deployer"} })},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.serviceAccount"},
				words: []string{"not set", "agent's own identity", "set spec.serviceAccount"}},
		},
		{
			name: "a default service account outside the allow-list is refused, naming the default",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.DefaultServiceAccount, r.AllowedServiceAccounts = "other", []string{"deployer"}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"defaultServiceAccount"}, words: []string{`"other"`}},
		},
		{
			name: "allow-lists of several restrictions add up",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount = "ops" }),
			restrictions: []fleet.GitRepoRestriction{
				restriction("a", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"deployer"} }),
				restriction("b", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"ops"} }),
			},
			want: Effective{ServiceAccount: "ops", Restrictions: []string{"a", "b"}},
		},
		{
			name: "a restriction without a list does not lift another's",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount = "anything" }),
			restrictions: []fleet.GitRepoRestriction{
				restriction("a", func(r *fleet.GitRepoRestriction) { r.AllowedServiceAccounts = []string{"deployer"} }),
				restriction("b", func(r *fleet.GitRepoRestriction) { r.DefaultClientSecretName = "x" }),
			},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.serviceAccount"}, words: []string{"GitRepoRestrictions a, b"}},
		},
		{
			name: "a repository matching a pattern",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedRepoPatterns = []string{`https://gitlab\.example\.com/.*`, `https://github\.com/example/.*`}
			})},
			want: Effective{Restrictions: []string{"r"}},
		},
		{
			name:         "a pattern equal to the URL allows it verbatim, even with regexp characters",
			repo:         gitRepo(func(s *fleet.GitRepoSpec) { s.Repo = "https://git.example.com/a+b.git" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) { r.AllowedRepoPatterns = []string{"https://git.example.com/a+b.git"} })},
			want:         Effective{Restrictions: []string{"r"}},
		},
		{
			// Fleet matches a GitRepoRestriction's patterns anywhere in the
			// URL: this one would allow https://evil.example/github.com/example/x.
			name: "patterns are anchored: a pattern inside the URL does not allow it",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.Repo = "https://evil.example/github.com/example/apps" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedRepoPatterns = []string{`github\.com/example/.*`}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.repo"},
				words: []string{"https://evil.example/github.com/example/apps", "whole URL", `github\\.com/example/.*`}},
		},
		{
			name: "an alternation is anchored as a whole",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.Repo = "https://github.com/example/apps.evil.example/x" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedRepoPatterns = []string{`https://gitlab\.example\.com/x|https://github\.com/example/apps`}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.repo"}},
		},
		{
			name: "a pattern that is not a regular expression makes the restriction invalid, whatever the GitRepo",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("broken", func(r *fleet.GitRepoRestriction) {
				r.AllowedRepoPatterns = []string{`https://github\.com/example/.*`, `https://(gitlab`}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionInvalidReason}, fields: []string{"allowedRepoPatterns[1]"},
				words: []string{"GitRepoRestriction broken", `"https://(gitlab"`, "missing closing )", "fix it"}},
		},
		{
			name: "target namespace required by allowedTargetNamespaces",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaces = []string{"team-a", "team-b"}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.targetNamespace"},
				words: []string{"not set", `["team-a", "team-b"]`}},
		},
		{
			name: "target namespace outside allowedTargetNamespaces",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.TargetNamespace = "kube-system" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaces = []string{"team-a"}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.targetNamespace"}, words: []string{`"kube-system"`}},
		},
		{
			name: "target namespace in allowedTargetNamespaces",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.TargetNamespace = "team-a" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaces = []string{"team-a"}
			})},
			want: Effective{TargetNamespace: "team-a", Restrictions: []string{"r"}},
		},
		{
			name: "a namespace selector requires a target namespace",
			repo: gitRepo(nil),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.targetNamespace"}, words: []string{"team=a"}},
		},
		{
			name: "a namespace selector is passed on for the Bundles",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.TargetNamespace = "team-a" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
			})},
			want: Effective{TargetNamespace: "team-a", Restrictions: []string{"r"},
				AllowedTargetNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
		},
		{
			name: "an invalid namespace selector makes the restriction invalid",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.TargetNamespace = "team-a" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedTargetNamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Maybe"}}}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionInvalidReason}, fields: []string{"allowedTargetNamespaceSelector"}, words: []string{"GitRepoRestriction r"}},
		},
		{
			name: "client Secret: an empty one is allowed (no credentials), a listed one too",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ClientSecretName = "org-token" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedClientSecretNames = []string{"org-token"}
			})},
			want: Effective{ClientSecretName: "org-token", Restrictions: []string{"r"}},
		},
		{
			name: "client Secret outside the allow-list is refused",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ClientSecretName = "someone-elses-token" }),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedClientSecretNames = []string{"org-token"}
			})},
			refused: &refusal{reasons: []string{fleet.RestrictionRefusedReason}, fields: []string{"spec.clientSecretName"}, words: []string{`"someone-elses-token"`, `["org-token"]`}},
		},
		{
			name: "restrictions of another namespace do not apply",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.ServiceAccount = "anything" }),
			restrictions: []fleet.GitRepoRestriction{{
				ObjectMeta:             metav1.ObjectMeta{Namespace: "other", Name: "r"},
				AllowedServiceAccounts: []string{"deployer"}, DefaultClientSecretName: "x",
			}},
			want: Effective{ServiceAccount: "anything"},
		},
		{
			name: "insecureSkipTLSVerify is refused unless the configuration allows it",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.InsecureSkipTLSverify = true }),
			refused: &refusal{reasons: []string{fleet.InsecureSkipTLSVerifyRefusedReason}, fields: []string{"spec.insecureSkipTLSVerify"},
				words: []string{"spec.caBundle", "allowGitInsecureSkipTLSVerify"}},
		},
		{
			name: "insecureSkipTLSVerify with the configuration's allowance",
			repo: gitRepo(func(s *fleet.GitRepoSpec) { s.InsecureSkipTLSverify = true }),
			opts: Options{AllowInsecureSkipTLSVerify: true},
			want: Effective{},
		},
		{
			name: "every problem is reported, the restriction's own first",
			repo: gitRepo(func(s *fleet.GitRepoSpec) {
				s.Repo, s.ServiceAccount, s.ClientSecretName, s.InsecureSkipTLSverify = "https://evil.example/x", "root", "stolen", true
			}),
			restrictions: []fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) {
				r.AllowedRepoPatterns = []string{`https://github\.com/example/.*`, `(`}
				r.AllowedServiceAccounts = []string{"deployer"}
				r.AllowedClientSecretNames = []string{"org-token"}
				r.AllowedTargetNamespaces = []string{"team-a"}
			})},
			refused: &refusal{
				reasons: []string{fleet.RestrictionInvalidReason, fleet.InsecureSkipTLSVerifyRefusedReason, fleet.RestrictionRefusedReason,
					fleet.RestrictionRefusedReason, fleet.RestrictionRefusedReason, fleet.RestrictionRefusedReason},
				fields: []string{"allowedRepoPatterns[1]", "spec.insecureSkipTLSVerify", "spec.targetNamespace", "spec.serviceAccount", "spec.repo", "spec.clientSecretName"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.repo.DeepCopy()
			got, err := Evaluate(tc.repo, tc.restrictions, tc.opts)
			if d := cmp.Diff(before, tc.repo); d != "" {
				t.Errorf("Evaluate changed the GitRepo (-before +after):\n%s", d)
			}
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("effective settings (-want +got):\n%s", d)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("accepted (%+v, %v), want a refusal", got, err)
			}
			var reasons, fields []string
			for _, p := range r.Problems {
				reasons, fields = append(reasons, p.Reason), append(fields, p.Field)
			}
			if d := cmp.Diff(tc.refused.reasons, reasons); d != "" {
				t.Errorf("reasons (-want +got):\n%s\n%v", d, err)
			}
			if d := cmp.Diff(tc.refused.fields, fields); d != "" {
				t.Errorf("fields (-want +got):\n%s\n%v", d, err)
			}
			if r.Reason() != tc.refused.reasons[0] {
				t.Errorf("Reason() = %s, want the first problem's %s", r.Reason(), tc.refused.reasons[0])
			}
			for _, w := range tc.refused.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the message does not say %q: %v", w, err)
				}
			}
		})
	}
}

// TestEvaluate_SelectorsOfSeveralRestrictionsAllHold: the namespace
// selectors of several restrictions are all required. Fleet merges their
// matchLabels key by key, the later value replacing the earlier; here two
// restrictions that disagree on a key match no namespace, rather than the
// one whose restriction sorts last.
func TestEvaluate_SelectorsOfSeveralRestrictionsAllHold(t *testing.T) {
	repo := gitRepo(func(s *fleet.GitRepoSpec) { s.TargetNamespace = "apps" })
	sel := func(m map[string]string, e ...metav1.LabelSelectorRequirement) func(*fleet.GitRepoRestriction) {
		return func(r *fleet.GitRepoRestriction) {
			r.AllowedTargetNamespaceSelector = &metav1.LabelSelector{MatchLabels: m, MatchExpressions: e}
		}
	}
	tier := metav1.LabelSelectorRequirement{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"system"}}
	for _, tc := range []struct {
		name         string
		restrictions []fleet.GitRepoRestriction
		matches      map[string]bool // namespace labels (k=v,...) → whether the merged selector matches
	}{
		{
			name: "different keys: both",
			restrictions: []fleet.GitRepoRestriction{
				restriction("a", sel(map[string]string{"team": "a"})),
				restriction("b", sel(map[string]string{"env": "prod"}, tier)),
			},
			matches: map[string]bool{"team=a,env=prod": true, "team=a": false, "env=prod": false, "team=a,env=prod,tier=system": false},
		},
		{
			name: "the same key with two values: nothing",
			restrictions: []fleet.GitRepoRestriction{
				restriction("a", sel(map[string]string{"team": "a"})),
				restriction("b", sel(map[string]string{"team": "b"})),
			},
			matches: map[string]bool{"team=a": false, "team=b": false},
		},
		{
			name: "the same requirement twice: once",
			restrictions: []fleet.GitRepoRestriction{
				restriction("a", sel(map[string]string{"team": "a"}, tier)),
				restriction("b", sel(map[string]string{"team": "a"}, tier)),
			},
			matches: map[string]bool{"team=a": true, "team=a,tier=system": false},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eff, err := Evaluate(repo, tc.restrictions, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s, err := metav1.LabelSelectorAsSelector(eff.AllowedTargetNamespaceSelector)
			if err != nil {
				t.Fatal(err)
			}
			for set, want := range tc.matches {
				l, err := labels.ConvertSelectorToLabelsMap(set)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Matches(l); got != want {
					t.Errorf("selector %s on a namespace labelled %s: %v, want %v", s, set, got, want)
				}
			}
			if len(tc.restrictions[0].AllowedTargetNamespaceSelector.MatchExpressions) > 1 || len(tc.restrictions[0].AllowedTargetNamespaceSelector.MatchLabels) > 1 {
				t.Errorf("merging changed restriction %s's selector", tc.restrictions[0].Name)
			}
		})
	}
}

// TestRedactURL: a credential written into a repository URL never reaches
// a message; the rest of the URL does, so the user sees which repository.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/example/apps":             "https://github.com/example/apps",
		"https://user:s3cret@git.example.com/a/b.git": "https://***@git.example.com/a/b.git",
		"https://ghp_token@github.com/example/apps":   "https://***@github.com/example/apps",
		"https://u:p@ss@git.example.com":              "https://***@git.example.com",
		"ssh://git@git.example.com:2222/a.git":        "ssh://***@git.example.com:2222/a.git",
		"git@github.com:example/apps.git":             "git@github.com:example/apps.git",
		"https://git.example.com/path/with@sign/repo": "https://git.example.com/path/with@sign/repo",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	_, err := Evaluate(gitRepo(func(s *fleet.GitRepoSpec) { s.Repo = "https://x:s3cret@evil.example/apps" }),
		[]fleet.GitRepoRestriction{restriction("r", func(r *fleet.GitRepoRestriction) { r.AllowedRepoPatterns = []string{`https://github\.com/.*`} })}, Options{})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "evil.example/apps") {
		t.Errorf("refusal of a URL with a credential: %v", err)
	}
}
