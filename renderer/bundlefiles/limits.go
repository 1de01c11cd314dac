package bundlefiles

import (
	"fmt"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/config"
)

// SizeLimits bound a Bundle's resources after base64 and gzip decoding, in
// bytes.
type SizeLimits struct {
	// Resource bounds one resource.
	Resource int64 `json:"resource"`
	// Total bounds all resources together.
	Total int64 `json:"total"`
}

// DefaultSizeLimits are the limits of a controller configuration that sets
// none.
func DefaultSizeLimits() SizeLimits {
	return SizeLimitsOf(&config.Config{})
}

// SizeLimitsOf returns the size limits a controller configuration sets.
func SizeLimitsOf(cfg *config.Config) SizeLimits {
	return SizeLimits{Resource: cfg.GetBundleMaxResourceSize(), Total: cfg.GetBundleMaxSize()}
}

// The configuration keys that set the limits, named in errors so the author
// knows which limit they met and the operator which to raise.
const (
	limitPerResource = "bundleMaxResourceSize"
	limitTotal       = "bundleMaxSize"
)

func limitOf(l SizeLimits, setting string) int64 {
	if setting == limitTotal {
		return l.Total
	}
	return l.Resource
}

// TooLargeError is a Bundle whose content exceeds a size limit.
type TooLargeError struct {
	// Resource names the resource that crossed the limit, or is empty for
	// the rendered manifests.
	Resource string
	// Limit is the limit in bytes, and Setting the configuration key that
	// sets it.
	Limit   int64
	Setting string
}

func (e *TooLargeError) Error() string {
	switch e.Setting {
	case limitTotal:
		return fmt.Sprintf("%s: the Bundle's resources decode to more than %s together, the limit (%s); remove what the clusters do not need or split the Bundle",
			e.Resource, FormatBytes(e.Limit), e.Setting)
	case limitPerResource:
		return fmt.Sprintf("%s decodes to more than %s, the limit per resource (%s); split it or remove what the clusters do not need",
			e.Resource, FormatBytes(e.Limit), e.Setting)
	default:
		return fmt.Sprintf("the rendered manifests are larger than %s, the most an agent accepts; split the Bundle", FormatBytes(e.Limit))
	}
}

// Reason is the Bundle condition reason this error reports as.
func (e *TooLargeError) Reason() string { return fleet.BundleTooLargeReason }

// FormatBytes formats a size the way the configuration spells limits:
// "32Mi", "512Ki", or bytes.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGi", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMi", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMi", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKi", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
