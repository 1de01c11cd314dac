package gitsource

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// endpoint is a repository URL that was checked: https, http or ssh (also scp-like
// git@host:path), no password in it.
type endpoint struct {
	// raw is the URL as the user wrote it: what go-git is given (it may hold a user name).
	raw    string
	scheme string // https, http, ssh
	host   string // lower case
	port   int    // 0: the scheme's default
	path   string // without a trailing "/" or ".git"
	user   string
}

// parseURL checks a GitRepo's repo field. Its errors quote the URL only when it holds no
// credential.
func parseURL(raw string) (endpoint, error) {
	if raw == "" {
		return endpoint{}, fmt.Errorf("the repository URL is empty")
	}
	for _, r := range raw {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return endpoint{}, fmt.Errorf("the repository URL contains a space or control character")
		}
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return endpoint{}, fmt.Errorf("the repository URL holds a password: put credentials in the client Secret (username/password or token), not in the URL")
		}
	}
	lower := strings.ToLower(raw)
	hasScheme := strings.Contains(raw, "://")
	switch {
	case hasScheme && !(strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "ssh://")):
		return endpoint{}, fmt.Errorf("repository URL %q: only https://, http://, ssh:// and scp-like user@host:path URLs are allowed", redactURL(raw))
	case !hasScheme && !strings.Contains(raw, ":"):
		return endpoint{}, fmt.Errorf("repository URL %q is a local path: only https://, http://, ssh:// and scp-like user@host:path URLs are allowed", raw)
	}
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("repository URL %q cannot be parsed", redactURL(raw))
	}
	scheme := strings.ToLower(ep.Protocol)
	switch scheme {
	case "https", "http", "ssh":
	default:
		return endpoint{}, fmt.Errorf("repository URL %q: only https://, http://, ssh:// and scp-like user@host:path URLs are allowed", redactURL(raw))
	}
	if ep.Password != "" || strings.Contains(ep.User, ":") {
		return endpoint{}, fmt.Errorf("the repository URL holds a password: put credentials in the client Secret (username/password or token), not in the URL")
	}
	host := strings.ToLower(ep.Host)
	if host == "" {
		return endpoint{}, fmt.Errorf("repository URL %q has no host", redactURL(raw))
	}
	if !validHost(host) {
		return endpoint{}, fmt.Errorf("repository URL %q: %q is not a host name or IP address", redactURL(raw), host)
	}
	port := ep.Port
	if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) || (scheme == "ssh" && port == 22) {
		port = 0
	}
	path := strings.TrimSuffix(strings.TrimRight(ep.Path, "/"), ".git")
	path = strings.TrimRight(path, "/")
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if path == "/" {
		return endpoint{}, fmt.Errorf("repository URL %q has no repository path", redactURL(raw))
	}
	return endpoint{raw: raw, scheme: scheme, host: host, port: port, path: path, user: ep.User}, nil
}

// String is the normalised URL: the cache key's repository and what errors name. It never holds
// a user name or password.
func (e endpoint) String() string {
	host := e.host
	if e.port != 0 {
		host += ":" + strconv.Itoa(e.port)
	}
	return e.scheme + "://" + host + e.path
}

// validHost is a DNS name (letters, digits, "-", "_" and dots), an IPv4 address or a bracketed
// IPv6 address: anything else (an "@", a "/", a "%") is a URL that parsed in an unintended way.
func validHost(host string) bool {
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") { // IPv6, as go-git keeps it
		return net.ParseIP(host[1:len(host)-1]) != nil
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return len(host) <= 253
}

// redactURL drops any userinfo from a URL for an error message.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	// Anything before the last "@" may be a user and password (scp-like user:pw@host:path,
	// or a URL that did not parse): keep a well-formed scheme, drop the rest.
	if scheme, _, ok := strings.Cut(raw, "://"); ok && len(scheme)+3 <= at && !strings.ContainsAny(scheme, "@:/") {
		return scheme + "://…@" + raw[at+1:]
	}
	if strings.Contains(raw[:at], ":") {
		return "…@" + raw[at+1:]
	}
	return raw
}
