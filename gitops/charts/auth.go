package charts

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Auth is what a GitRepo's helmSecretName Secret says about chart
// repositories (Fleet's keys): basic-auth credentials, CAs to trust, and
// whether to skip TLS verification or use plain HTTP for OCI.
type Auth struct {
	Username, Password string
	// CABundle: PEM certificates trusted besides the system's.
	CABundle []byte
	// InsecureSkipTLSVerify: only when the source component's
	// configuration allows it (AuthFromSecretData refuses it otherwise).
	InsecureSkipTLSVerify bool
	// PlainHTTP: OCI registries over http://. Credentials are never sent
	// over plain HTTP.
	PlainHTTP bool
}

// The Secret's keys, as Fleet reads them (`caBundle` is also read, as
// GitRepo spells the field).
const (
	keyUsername   = "username"
	keyPassword   = "password"
	keyCACerts    = "cacerts"
	keyCABundle   = "caBundle"
	keyInsecure   = "insecureSkipVerify"
	keyBasicHTTP  = "basicHTTP"
	keyInsecureGR = "insecureSkipTLSVerify"
)

// AuthFromSecretData reads the data of a GitRepo's helmSecretName Secret.
// allowInsecure is the source component's configuration: without it a
// Secret asking to skip TLS verification is refused rather than quietly
// verified. Errors name the key, never a value.
func AuthFromSecretData(data map[string][]byte, allowInsecure bool) (Auth, error) {
	var a Auth
	user, hasUser := data[keyUsername]
	pass, hasPass := data[keyPassword]
	if hasUser != hasPass {
		return Auth{}, errors.New("the Helm Secret has one of the keys username and password but not the other: set both, or neither")
	}
	a.Username, a.Password = string(user), string(pass)
	for _, k := range []string{keyCACerts, keyCABundle} {
		if pem, ok := data[k]; ok && len(pem) > 0 {
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				return Auth{}, fmt.Errorf("the Helm Secret's key %s holds no PEM certificate", k)
			}
			a.CABundle = append(append(a.CABundle, pem...), '\n')
		}
	}
	for _, k := range []string{keyInsecure, keyInsecureGR} {
		v, ok := data[k]
		if !ok {
			continue
		}
		b, err := strconv.ParseBool(strings.TrimSpace(string(v)))
		if err != nil {
			return Auth{}, fmt.Errorf("the Helm Secret's key %s is not true or false", k)
		}
		if b && !allowInsecure {
			return Auth{}, fmt.Errorf("the Helm Secret sets %s, which the source component is not configured to allow; give the repository's CA in key cacerts instead", k)
		}
		a.InsecureSkipTLSVerify = a.InsecureSkipTLSVerify || b
	}
	if v, ok := data[keyBasicHTTP]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(string(v)))
		if err != nil {
			return Auth{}, fmt.Errorf("the Helm Secret's key %s is not true or false", keyBasicHTTP)
		}
		a.PlainHTTP = b
	}
	return a, nil
}

func (a Auth) hasCredentials() bool { return a.Username != "" || a.Password != "" }

// identity distinguishes credential sets in cache keys without holding
// them: empty for none.
func (a Auth) identity() string {
	if !a.hasCredentials() {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(a.Username), a.Username, len(a.Password), a.Password)
	return hex.EncodeToString(h.Sum(nil))
}

// trust distinguishes how servers are trusted (CAs, verification off,
// plain HTTP) in cache keys: empty for the system's CAs over verified TLS.
func (a Auth) trust() string {
	if len(a.CABundle) == 0 && !a.InsecureSkipTLSVerify && !a.PlainHTTP {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s|%t|%t", len(a.CABundle), a.CABundle, a.InsecureSkipTLSVerify, a.PlainHTTP)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// policy decides which requests carry the credentials. As Fleet: only when
// the GitRepo's helmRepoURLRegex (anchored at the start) matches the chart
// reference as written (helm.repo, else helm.chart). Stricter than Fleet:
// then only to https:// requests for the reference's own host, or to a URL
// the regex itself matches (a chart archive or a registry's token service
// on another host must be allowed by name); never over plain HTTP, and so
// never after a redirect elsewhere.
type policy struct {
	enabled bool
	home    *url.URL
	re      *regexp.Regexp
}

func newPolicy(ref Ref, a Auth, urlRegex string) (policy, error) {
	if !a.hasCredentials() || urlRegex == "" {
		return policy{}, nil
	}
	if _, err := regexp.Compile(urlRegex); err != nil {
		return policy{}, fmt.Errorf("helmRepoURLRegex %q is not a regular expression: %v", urlRegex, err)
	}
	re := regexp.MustCompile("^(?:" + urlRegex + ")")
	if !re.MatchString(ref.written) {
		return policy{}, nil
	}
	home, err := ref.host()
	if err != nil {
		return policy{}, err
	}
	return policy{enabled: true, home: home, re: re}, nil
}

// allows reports whether a request to u may carry the credentials.
func (p policy) allows(u *url.URL) bool {
	if !p.enabled || u.Scheme != "https" {
		return false
	}
	if sameHost(u, p.home) {
		return true
	}
	return p.re.MatchString(u.String())
}

func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

// gate is the transport under every request of a fetch: it adds basic
// credentials to the requests the policy allows (repositories and URLs),
// and removes any Authorization header (an OCI client's, or one an HTTP
// client copied onto a redirect) from every other request.
type gate struct {
	base   http.RoundTripper
	policy policy
	auth   Auth
	// addBasic: set basic credentials on allowed requests that have none
	// (OCI requests get theirs from the OCI client's challenge handling).
	addBasic bool
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	allowed := g.policy.allows(req.URL)
	switch {
	case !allowed && (req.Header.Get("Authorization") != "" || req.Header.Get("Cookie") != ""):
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
		req.Header.Del("Cookie")
	case allowed && g.addBasic && req.Header.Get("Authorization") == "":
		req = req.Clone(req.Context())
		req.SetBasicAuth(g.auth.Username, g.auth.Password)
	}
	return g.base.RoundTrip(req)
}
