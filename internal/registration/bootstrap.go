package registration

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Bootstrap is the import credential an agent registers with: the content of
// its fleet-agent-bootstrap Secret, which the agent chart renders from a
// ClusterRegistrationToken's values file.
type Bootstrap struct {
	APIServerURL                string
	APIServerCA                 []byte
	ClusterNamespace            string
	SystemRegistrationNamespace string
	Token                       string
	TokenName                   string
}

// ParseBootstrap reads a bootstrap Secret's data. The data comes from a
// values file a person handed over, so every problem is an error that says
// which key is wrong; nothing in it is echoed back except names.
func ParseBootstrap(data map[string][]byte) (*Bootstrap, error) {
	b := &Bootstrap{
		APIServerURL:                strings.TrimSpace(string(data[BootstrapKeyAPIServerURL])),
		APIServerCA:                 data[BootstrapKeyAPIServerCA],
		ClusterNamespace:            string(data[BootstrapKeyClusterNamespace]),
		SystemRegistrationNamespace: string(data[BootstrapKeySystemRegistrationNamespace]),
		Token:                       strings.TrimSpace(string(data[BootstrapKeyToken])),
		TokenName:                   string(data[BootstrapKeyTokenName]),
	}
	var missing []string
	for _, f := range []struct{ key, value string }{
		{BootstrapKeyAPIServerURL, b.APIServerURL},
		{BootstrapKeyClusterNamespace, b.ClusterNamespace},
		{BootstrapKeySystemRegistrationNamespace, b.SystemRegistrationNamespace},
		{BootstrapKeyToken, b.Token},
		{BootstrapKeyTokenName, b.TokenName},
	} {
		if f.value == "" {
			missing = append(missing, f.key)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	var problems []string
	if u, err := url.Parse(b.APIServerURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		problems = append(problems, "apiServerURL is not an absolute http(s) URL")
	}
	for _, f := range []struct{ key, value string }{
		{BootstrapKeyClusterNamespace, b.ClusterNamespace},
		{BootstrapKeySystemRegistrationNamespace, b.SystemRegistrationNamespace},
	} {
		if msgs := validation.IsDNS1123Label(f.value); len(msgs) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q is not a namespace name", f.key, cut(f.value)))
		}
	}
	// The token name is the value of the registration-token label and part
	// of the import ServiceAccount's name.
	if len(validation.IsValidLabelValue(b.TokenName)) > 0 || len(validation.IsDNS1123Subdomain(ImportServiceAccountName(b.TokenName))) > 0 {
		problems = append(problems, fmt.Sprintf("tokenName %q is not a ClusterRegistrationToken name", cut(b.TokenName)))
	}
	if strings.ContainsAny(b.Token, " \t\r\n") {
		problems = append(problems, "token is not a bearer token (it contains white space)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return b, nil
}

// cut shortens a value quoted in an error message.
func cut(s string) string {
	if len(s) > 63 {
		return s[:63] + "..."
	}
	return s
}
