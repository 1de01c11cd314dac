package charts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/Masterminds/semver/v3"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v4/pkg/registry"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// fromOCI resolves the tag (listing the registry's tags for a range, as
// Helm does), then fetches the chart layer, unless the cache has the chart
// of that manifest.
func (s *session) fromOCI(ctx context.Context) (*Chart, error) {
	client, err := s.registryClient()
	if err != nil {
		return nil, err
	}
	tag, err := s.ociTag(ctx, client)
	if err != nil {
		return nil, err
	}
	// Helm stores a version's "+" as "_" in tags (OCI tags have no "+").
	full := s.ref.Location + ":" + strings.ReplaceAll(tag, "+", "_")
	desc, err := withContext(ctx, func() (ocispec.Descriptor, error) { return client.Resolve(full) })
	if err != nil {
		return nil, s.ociError(err, tag)
	}
	manifestKey := s.identity + "|" + desc.Digest.String()
	s.f.mu.Lock()
	key, ok := s.f.resolved[manifestKey]
	s.f.mu.Unlock()
	if ok {
		if ch := s.f.cached(key); ch != nil {
			return ch, nil
		}
	}
	v, err, _ := s.f.flight.Do("oci|"+manifestKey, func() (any, error) {
		s.f.mu.Lock()
		key, ok := s.f.resolved[manifestKey]
		s.f.mu.Unlock()
		if ok {
			if ch := s.f.cached(key); ch != nil {
				return ch, nil
			}
		}
		// By digest: what was resolved, even if the tag moves meanwhile.
		data, err := s.pullChartLayer(ctx, client, s.ref.Location+"@"+desc.Digest.String(), tag)
		if err != nil {
			return nil, err
		}
		ch, err := s.f.add(s.ref.String(), s.identity, data, s.f.opts.Limits)
		if err != nil {
			return nil, err
		}
		s.f.mu.Lock()
		s.f.resolved[manifestKey] = s.identity + "|" + ch.Digest
		s.f.mu.Unlock()
		return ch, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Chart), nil
}

// registryClient is Helm's registry client over this session's HTTP client,
// with credentials only for the reference's registry (and only when the
// policy allows); it reads no credentials file, and its token cache lives
// for this fetch only, so one GitRepo's token never serves another.
func (s *session) registryClient() (*registry.Client, error) {
	authorizer := auth.Client{
		Client: s.client,
		Cache:  auth.NewCache(),
		Credential: func(_ context.Context, hostport string) (auth.Credential, error) {
			if s.policy.allows(&url.URL{Scheme: "https", Host: hostport}) {
				return auth.Credential{Username: s.auth.Username, Password: s.auth.Password}, nil
			}
			return auth.EmptyCredential, nil
		},
	}
	opts := []registry.ClientOption{
		registry.ClientOptHTTPClient(s.client),
		registry.ClientOptAuthorizer(authorizer),
		// Never read: the authorizer above answers every credential
		// question. Named so Helm does not open the user's file.
		registry.ClientOptCredentialsFile(filepath.Join(os.TempDir(), "fleet-gitops-no-registry-credentials.json")),
	}
	if s.auth.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", s.ref, err)
	}
	return c, nil
}

// ociTag picks the tag: the version when it is one (no listing), else the
// highest tag the range (or "latest stable", for none) accepts.
func (s *session) ociTag(ctx context.Context, client *registry.Client) (string, error) {
	if v := s.ref.Version; v != "" && !isRange(v) {
		return v, nil
	}
	tags, err := withContext(ctx, func() ([]string, error) { return client.Tags(s.ref.Location) })
	if err != nil {
		return "", s.ociError(err, s.ref.Version)
	}
	if len(tags) == 0 {
		return "", &NotFoundError{Chart: s.ref.String(), Detail: "the registry has no version tags for it"}
	}
	tag, err := registry.GetTagMatchingVersionOrConstraint(tags, s.ref.Version)
	if err != nil {
		have := tags
		if len(have) > 10 {
			have = append(have[:10:10], "…")
		}
		return "", &NotFoundError{Chart: s.ref.String(), Detail: "no version matches; the registry has " + strings.Join(have, ", ")}
	}
	return tag, nil
}

// isRange: anything but one exact semantic version (a range, a wildcard,
// a partial version such as 1.2): the registry's tags are listed for it.
func isRange(v string) bool {
	_, err := semver.StrictNewVersion(v)
	return err != nil
}

// pullChartLayer pulls the manifest and the chart layer only, refusing a
// layer larger than the archive limit before reading it.
func (s *session) pullChartLayer(ctx context.Context, client *registry.Client, ref, tag string) ([]byte, error) {
	limit := s.f.opts.Limits.Archive
	var tooLarge atomic.Int64 // PreCopy runs concurrently
	res, err := withContext(ctx, func() (*registry.GenericPullResult, error) {
		return client.Generic().PullGeneric(ref, registry.GenericPullOptions{
			AllowedMediaTypes: []string{ocispec.MediaTypeImageManifest, registry.ConfigMediaType, registry.ChartLayerMediaType, registry.LegacyChartLayerMediaType},
			PreCopy: func(_ context.Context, d ocispec.Descriptor) error {
				isChart := d.MediaType == registry.ChartLayerMediaType || d.MediaType == registry.LegacyChartLayerMediaType
				if d.Size > limit && (isChart || d.MediaType == registry.ConfigMediaType) {
					tooLarge.Store(d.Size)
					return errBound
				}
				return nil
			},
		})
	})
	if n := tooLarge.Load(); n > 0 {
		return nil, &TooLargeError{Chart: s.ref.String(), What: "archive", Size: n, Limit: limit}
	}
	if err != nil {
		return nil, s.ociError(err, tag)
	}
	for _, d := range res.Descriptors {
		if d.MediaType == registry.ChartLayerMediaType || d.MediaType == registry.LegacyChartLayerMediaType {
			return client.Generic().GetDescriptorData(res.MemoryStore, d)
		}
	}
	return nil, fmt.Errorf("%s: the registry's manifest for %s has no Helm chart layer (%s): not a Helm chart", s.ref, tag, registry.ChartLayerMediaType)
}

// ociError words a registry's answer.
func (s *session) ociError(err error, version string) error {
	var ec errcode.Error
	var resp *errcode.ErrorResponse
	switch {
	case errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound,
		errors.As(err, &ec) && (ec.Code == errcode.ErrorCodeNameUnknown || ec.Code == errcode.ErrorCodeManifestUnknown),
		strings.Contains(err.Error(), ": not found"):
		return &NotFoundError{Chart: s.ref.String(), Detail: fmt.Sprintf("the registry has no %s:%s", s.ref.Location, version)}
	case errors.As(err, &resp) && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
		u := *resp.URL
		return s.statusError(resp.StatusCode, &u)
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		// The registry asked for credentials this fetch does not send.
		home, _ := s.ref.host()
		return s.statusError(http.StatusUnauthorized, home)
	}
	return fmt.Errorf("%s: %v", s.ref, redactErr(err))
}

// withContext runs a call of Helm's registry client, which takes no
// context, so that the fetch returns when ctx ends (the client's requests
// end with the HTTP client's own timeout).
func withContext[T any](ctx context.Context, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
