package gitsource

import (
	"fmt"
	"strings"
	"testing"
)

func TestKeyOf_OneKeyPerRepositoryAndRef(t *testing.T) {
	for _, tc := range []struct {
		repo Repository
		want Key
	}{
		{Repository{URL: "https://github.com/rancher/fleet-examples"}, Key{"https://github.com/rancher/fleet-examples", "refs/heads/master"}},
		{Repository{URL: "https://GitHub.com:443/rancher/fleet-examples.git/", Branch: "main"}, Key{"https://github.com/rancher/fleet-examples", "refs/heads/main"}},
		{Repository{URL: "https://someone@github.com/rancher/fleet-examples", Revision: "v1.0"}, Key{"https://github.com/rancher/fleet-examples", "refs/tags/v1.0"}},
		{Repository{URL: "git@github.com:rancher/fleet-examples.git", Revision: strings.Repeat("AB", 20)}, Key{"ssh://github.com/rancher/fleet-examples", strings.Repeat("ab", 20)}},
		{Repository{URL: "ssh://git@github.com:22/rancher/fleet-examples"}, Key{"ssh://github.com/rancher/fleet-examples", "refs/heads/master"}},
		{Repository{URL: "ssh://git@git.example.com:2222/team/repo"}, Key{"ssh://git.example.com:2222/team/repo", "refs/heads/master"}},
		{Repository{URL: "http://git.local:8080/team/repo.git"}, Key{"http://git.local:8080/team/repo", "refs/heads/master"}},
		{Repository{URL: "https://[fd00::1]:8443/team/repo"}, Key{"https://[fd00::1]:8443/team/repo", "refs/heads/master"}},
		{Repository{URL: "git@10.0.0.7:team/repo"}, Key{"ssh://10.0.0.7/team/repo", "refs/heads/master"}},
	} {
		got, err := KeyOf(tc.repo)
		if err != nil {
			t.Fatalf("%s: %v", tc.repo.URL, err)
		}
		if got != tc.want {
			t.Errorf("%s: key %s, want %s", tc.repo.URL, got, tc.want)
		}
	}
}

func TestKeyOf_RefusesWhatIsNotARemoteRepository(t *testing.T) {
	for url, want := range map[string]string{
		"": "empty",
		"file:///var/run/secrets/kubernetes.io/serviceaccount": "only https://",
		"/var/lib/repo":                             "local path",
		"./repo":                                    "local path",
		"git://github.com/rancher/fleet":            "only https://",
		"ftp://example.com/repo":                    "only https://",
		"https://github.com/":                       "no repository path",
		"https://github.com/a b":                    "space",
		"https://x-token:ghp_SECRET@github.com/a/b": "holds a password",
		"user:hunter2@github.com:a/b.git":           "holds a password",
		"@:0":                                       "not a host name",
		"https://exa%mple.com/a":                    "",
	} {
		_, err := KeyOf(Repository{URL: url})
		if err == nil {
			t.Errorf("%q: accepted", url)
			continue
		}
		if ReasonOf(err) != ReasonInvalid || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v (reason %s), want %q", url, err, ReasonOf(err), want)
		}
		if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the password: %v", url, err)
		}
	}
	for _, rev := range []string{"v1..2", "-rf", "tag with space", "a:b"} {
		if _, err := KeyOf(Repository{URL: "https://h/r", Revision: rev}); ReasonOf(err) != ReasonInvalid {
			t.Errorf("revision %q: %v", rev, err)
		}
	}
}

func TestParseCredentials(t *testing.T) {
	key := sshClientKey(t)
	const knownHosts = "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
	for _, tc := range []struct {
		name    string
		data    map[string]string
		user    string
		pass    string
		ssh     bool
		wantErr string
	}{
		{name: "basic auth", data: map[string]string{"username": "u", "password": "p"}, user: "u", pass: "p"},
		{name: "Fleet's password-only form sends it as the user", data: map[string]string{"password": "ghp_tok"}, user: "ghp_tok"},
		{name: "token with the default user", data: map[string]string{"token": "ghp_tok\n"}, user: "git", pass: "ghp_tok"},
		{name: "token with a user", data: map[string]string{"username": "oauth2", "token": "glpat"}, user: "oauth2", pass: "glpat"},
		{name: "ssh", data: map[string]string{"ssh-privatekey": string(key), "known_hosts": knownHosts}, ssh: true},
		{name: "ssh without known_hosts is read (the URL check wants it)", data: map[string]string{"ssh-privatekey": string(key)}, ssh: true},
		{name: "password and token", data: map[string]string{"password": "SECRETPW", "token": "SECRETTOK"}, wantErr: `both "password" and "token"`},
		{name: "not a key", data: map[string]string{"ssh-privatekey": "SECRETKEY"}, wantErr: `"ssh-privatekey" is not a PEM`},
		{name: "bad known_hosts", data: map[string]string{"ssh-privatekey": string(key), "known_hosts": "SECRET junk"}, wantErr: `"known_hosts": no valid host key`},
		{name: "nothing usable", data: map[string]string{"caBundle": "x"}, wantErr: "has none of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range tc.data {
				data[k] = []byte(v)
			}
			c, err := ParseCredentials(data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "SECRET") {
					t.Fatalf("the error shows a value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.username != tc.user || c.password != tc.pass || (c.signer != nil) != tc.ssh {
				t.Fatalf("got user %q password %q ssh %t", c.username, c.password, c.signer != nil)
			}
			for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
				if out := fmt.Sprintf(f, c); strings.Contains(out, "tok") || strings.Contains(out, "PRIVATE") || (tc.pass != "" && strings.Contains(out, tc.pass)) {
					t.Fatalf("%s prints the credentials: %s", f, out)
				}
			}
		})
	}
	if c, err := ParseCredentials(nil); c != nil || err != nil {
		t.Fatalf("no data: %v %v", c, err)
	}
}

// FuzzKeyOf: any repository URL gives a key or an error, and an error never shows a password
// from the URL.
func FuzzKeyOf(f *testing.F) {
	for _, s := range []string{"https://github.com/a/b", "git@h:a/b", "https://u:pw@h/a", "ssh://u:pw@h:22/a", "u:pw@h:a/b", "file:///x", "https://h/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, url string) {
		k, err := KeyOf(Repository{URL: url})
		if err != nil {
			if strings.Contains(url, ":pw@") && strings.Contains(err.Error(), ":pw@") {
				t.Fatalf("error shows the password: %v", err)
			}
			return
		}
		// The key must never carry a user or password: nothing before its host. An "@" inside
		// the path (scp-like "h:pw@" is host h, path pw@) is not one.
		_, rest, ok := strings.Cut(k.Repo, "://")
		authority, _, _ := strings.Cut(rest, "/")
		if !ok || strings.Contains(authority, "@") {
			t.Fatalf("key %s holds credentials", k)
		}
	})
}
