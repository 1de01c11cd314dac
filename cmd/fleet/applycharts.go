package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/bundlereader"
	"github.com/gitops-fleet/fleet/gitops/charts"
)

// chartFlags are fleet apply's Helm repository flags, Fleet's names: the
// credentials and trust for the charts fleet.yaml files fetch from
// repositories, OCI registries and URLs.
type chartFlags struct {
	username, passwordFile, caCertsFile, urlRegex string
	basicHTTP, insecureSkipTLS                    bool
}

func (c *chartFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&c.username, "username", "", "basic auth username for Helm repositories and registries (default $HELM_USERNAME); sent only where --helm-repo-url-regex matches")
	fl.StringVar(&c.passwordFile, "password-file", "", "file holding the basic auth password for Helm repositories and registries")
	fl.StringVar(&c.caCertsFile, "cacerts-file", "", "PEM file of CA certificates that Helm repositories and registries are verified with (beside the system's)")
	fl.StringVar(&c.urlRegex, "helm-repo-url-regex", "", "the credentials are sent only to chart references this regular expression matches (the whole URL; empty: nowhere)")
	fl.BoolVar(&c.basicHTTP, "helm-basic-http", false, "reach OCI registries over plain HTTP")
	fl.BoolVar(&c.insecureSkipTLS, "helm-insecure-skip-tls", false, "do not verify the TLS certificates of Helm repositories and registries")
}

// fetcher returns the chart fetcher fleet apply reads with: the user's
// own network and the flags' credentials, with gitops/charts' rules (the
// source component's) for where credentials may go.
func (c *chartFlags) fetcher(cmd *cobra.Command) (bundlereader.ChartFetcher, error) {
	data := map[string][]byte{}
	user := c.username
	if !cmd.Flags().Changed("username") {
		user = os.Getenv("HELM_USERNAME")
	}
	if user != "" || c.passwordFile != "" {
		if user == "" || c.passwordFile == "" {
			return nil, usageError("--username (or $HELM_USERNAME) and --password-file go together: give both, or neither")
		}
		pass, err := os.ReadFile(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		data["username"], data["password"] = []byte(user), trimNewline(pass)
	}
	if c.caCertsFile != "" {
		pem, err := os.ReadFile(c.caCertsFile)
		if err != nil {
			return nil, fmt.Errorf("--cacerts-file: %w", err)
		}
		data["cacerts"] = pem
	}
	if c.insecureSkipTLS {
		data["insecureSkipVerify"] = []byte("true")
	}
	if c.basicHTTP {
		data["basicHTTP"] = []byte(strconv.FormatBool(true))
	}
	// The user asked for it on their own command line: allowed here, unlike
	// a GitRepo's Secret, which the installation must allow.
	auth, err := charts.AuthFromSecretData(data, true)
	if err != nil {
		return nil, fmt.Errorf("chart credentials: %w", err)
	}
	return &chartFetcher{f: charts.NewFetcher(charts.Options{}), auth: auth, urlRegex: c.urlRegex}, nil
}

// chartFetcher adapts gitops/charts to the bundle reader.
type chartFetcher struct {
	f        *charts.Fetcher
	auth     charts.Auth
	urlRegex string
}

func (c *chartFetcher) FetchChart(ctx context.Context, ref bundlereader.ChartRef) (*bundlereader.Chart, error) {
	ch, err := c.f.Fetch(ctx, charts.Request{
		Helm: fleet.HelmOptions{Chart: ref.Chart, Repo: ref.Repo, Version: ref.Version},
		Auth: c.auth, URLRegex: c.urlRegex,
	})
	if err != nil {
		return nil, err
	}
	return &bundlereader.Chart{Files: ch.Files, Digest: ch.Digest}, nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
