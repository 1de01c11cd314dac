package gitsource

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/skeema/knownhosts"
	gossh "golang.org/x/crypto/ssh"
)

// The keys of a client Secret's data (Fleet's clientSecretName: a kubernetes.io/basic-auth or
// kubernetes.io/ssh-auth Secret, known_hosts beside the key).
const (
	SecretUsername      = "username"       // basic auth
	SecretPassword      = "password"       // basic auth; alone, it is the user name (Fleet's token form)
	SecretToken         = "token"          // an access token, sent as the basic-auth password
	SecretSSHPrivateKey = "ssh-privatekey" // PEM or OpenSSH private key, without passphrase
	SecretKnownHosts    = "known_hosts"    // required with ssh-privatekey
)

// defaultTokenUser is the basic-auth user name sent with a token when the Secret names none:
// GitHub, GitLab, Gitea, Bitbucket and Azure DevOps take any non-empty user with a token.
const defaultTokenUser = "git"

// Credentials are what a client Secret holds. They are never printed: String and GoString
// redact them.
type Credentials struct {
	username, password string
	sshKey             []byte
	signer             gossh.Signer
	knownHosts         []byte
}

// ParseCredentials reads a client Secret's data. Errors name the key that is wrong, never a
// value. Nil or empty data gives nil Credentials (anonymous access).
func ParseCredentials(data map[string][]byte) (*Credentials, error) {
	if len(data) == 0 {
		return nil, nil
	}
	c := &Credentials{
		username:   string(data[SecretUsername]),
		password:   string(data[SecretPassword]),
		knownHosts: data[SecretKnownHosts],
	}
	if tok := data[SecretToken]; len(tok) > 0 {
		if c.password != "" {
			return nil, fmt.Errorf("client Secret has both %q and %q: keep one", SecretPassword, SecretToken)
		}
		c.password = strings.TrimSpace(string(tok))
		if c.username == "" {
			c.username = defaultTokenUser
		}
	}
	if c.username == "" && c.password != "" {
		// Fleet's form: a basic-auth Secret with only a password (a token) sends it as the user.
		c.username, c.password = c.password, ""
	}
	if key := data[SecretSSHPrivateKey]; len(key) > 0 {
		signer, err := gossh.ParsePrivateKey(key)
		if err != nil {
			var missing *gossh.PassphraseMissingError
			if errors.As(err, &missing) {
				return nil, fmt.Errorf("client Secret key %q is encrypted with a passphrase: store the key without one", SecretSSHPrivateKey)
			}
			return nil, fmt.Errorf("client Secret key %q is not a PEM or OpenSSH private key", SecretSSHPrivateKey)
		}
		c.sshKey, c.signer = key, signer
	}
	if len(c.knownHosts) > 0 {
		if err := checkKnownHosts(c.knownHosts); err != nil {
			return nil, fmt.Errorf("client Secret key %q: %w", SecretKnownHosts, err)
		}
	}
	if c.username == "" && c.signer == nil {
		return nil, fmt.Errorf("client Secret has none of %q, %q, %q or %q", SecretUsername, SecretPassword, SecretToken, SecretSSHPrivateKey)
	}
	return c, nil
}

// String keeps credentials out of logs and error messages.
func (c *Credentials) String() string { return "gitsource.Credentials{redacted}" }

// GoString keeps credentials out of %#v.
func (c *Credentials) GoString() string { return c.String() }

// fingerprint identifies the credentials without revealing them: callers with the same
// fingerprint share an ls-remote answer.
func (c *Credentials) fingerprint() string {
	if c == nil {
		return "anonymous"
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(c.username), []byte(c.password), c.sshKey, c.knownHosts} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkKnownHosts parses every line, so a wrong line is reported when the Secret is read.
func checkKnownHosts(data []byte) error {
	rest := data
	keys := 0
	for len(bytes.TrimSpace(rest)) > 0 {
		_, _, _, _, next, err := gossh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break // only comments and blank lines were left
		}
		if err != nil {
			return fmt.Errorf("no valid host key (line format: host key-type base64-key)")
		}
		keys++
		rest = next
	}
	if keys == 0 {
		return fmt.Errorf("has no host key")
	}
	return nil
}

// authMethod is what go-git is given for an endpoint, or nil for anonymous https/http.
// tmpDir holds known_hosts for the moment the callback is built.
func authMethod(ep endpoint, c *Credentials, fallbackKnownHosts []byte, tmpDir string, timeout time.Duration) (transport.AuthMethod, error) {
	if ep.scheme == "ssh" {
		if c == nil || c.signer == nil {
			return nil, fmt.Errorf("an ssh URL needs a client Secret with %q and %q", SecretSSHPrivateKey, SecretKnownHosts)
		}
		kh := c.knownHosts
		if len(kh) == 0 {
			kh = fallbackKnownHosts
		}
		if len(kh) == 0 {
			return nil, fmt.Errorf("no known_hosts for %s: add the server's host key to the client Secret's %q (ssh-keyscan output, checked out of band); host keys are never accepted unverified", ep.host, SecretKnownHosts)
		}
		db, err := knownHostsDB(kh, tmpDir)
		if err != nil {
			return nil, err
		}
		user := ep.user
		if user == "" {
			user = "git"
		}
		hostPort := ep.host + ":22"
		if ep.port != 0 {
			hostPort = fmt.Sprintf("%s:%d", ep.host, ep.port)
		}
		return &sshAuth{
			user:       user,
			signer:     c.signer,
			callback:   db.HostKeyCallback(),
			algorithms: db.HostKeyAlgorithms(hostPort),
			timeout:    timeout,
		}, nil
	}
	if c == nil || c.username == "" {
		return nil, nil
	}
	return &githttp.BasicAuth{Username: c.username, Password: c.password}, nil
}

// knownHostsDB parses known_hosts data; skeema/knownhosts reads files only, so the data lives
// in a temporary file for the call.
func knownHostsDB(data []byte, tmpDir string) (*knownhosts.HostKeyDB, error) {
	f, err := os.CreateTemp(tmpDir, "known_hosts-")
	if err != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", errors.Join(werr, cerr))
	}
	db, err := knownhosts.NewDB(f.Name())
	if err != nil {
		return nil, fmt.Errorf("known_hosts: no valid host key")
	}
	return db, nil
}

// sshAuth is go-git's ssh AuthMethod with a host-key check from known_hosts only (never
// InsecureIgnoreHostKey) and a dial timeout (go-git's ssh dial does not follow the context).
type sshAuth struct {
	user       string
	signer     gossh.Signer
	callback   gossh.HostKeyCallback
	algorithms []string
	timeout    time.Duration
}

func (a *sshAuth) Name() string   { return "ssh-public-keys" }
func (a *sshAuth) String() string { return "user: " + a.user + ", name: ssh-public-keys" }

func (a *sshAuth) ClientConfig() (*gossh.ClientConfig, error) {
	return &gossh.ClientConfig{
		User:              a.user,
		Auth:              []gossh.AuthMethod{gossh.PublicKeys(a.signer)},
		HostKeyCallback:   a.callback,
		HostKeyAlgorithms: a.algorithms,
		Timeout:           a.timeout,
	}, nil
}
