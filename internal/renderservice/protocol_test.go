package renderservice

import (
	"strings"
	"testing"
	"time"

	"github.com/gitops-fleet/fleet/internal/config"
	"github.com/gitops-fleet/fleet/internal/renderworker"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
)

// The limits a render runs within are the controller's, sent with it; the
// renderer fills in the defaults for what an older controller leaves out,
// never runs more workers than its own --concurrency, and refuses limits
// that make no sense.
func TestRequest_LimitsAreTheControllersCappedByTheRenderersConcurrency(t *testing.T) {
	defaults := renderworker.LimitsOf(&config.Config{})
	sent := renderworker.Limits{Size: bundlefiles.SizeLimits{Resource: 1 << 20, Total: 2 << 20}, Timeout: 5 * time.Second, Memory: 100 << 20, Concurrency: 8}
	for _, tc := range []struct {
		name           string
		req            request
		maxConcurrency int
		want           renderworker.Limits
		err            string
	}{
		{name: "as sent", req: request{Request: renderworker.Request{Limits: sent.Size}, Bounds: boundsOf(sent)}, want: sent},
		{name: "capped by the renderer", req: request{Request: renderworker.Request{Limits: sent.Size}, Bounds: boundsOf(sent)}, maxConcurrency: 2,
			want: renderworker.Limits{Size: sent.Size, Timeout: sent.Timeout, Memory: sent.Memory, Concurrency: 2}},
		{name: "none sent: the defaults", req: request{}, want: defaults},
		{name: "a timeout that is not a duration", req: request{Bounds: bounds{Timeout: "soon"}}, err: `bounds.timeout "soon" is not a positive duration`},
		{name: "a negative timeout", req: request{Bounds: bounds{Timeout: "-1s"}}, err: "not a positive duration"},
		{name: "negative memory", req: request{Bounds: bounds{Memory: -1}}, err: "bounds.memory -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.req.limits(tc.maxConcurrency)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v (%v), want %+v", got, err, tc.want)
			}
		})
	}
}

// The largest render request follows the controller's bundleMaxSize: a
// Bundle's resources are no longer bounded by one API object
// (spec.contentsId), so their JSON may be about twice bundleMaxSize.
func TestMaxRequestBytes_FollowsBundleMaxSize(t *testing.T) {
	for _, tc := range []struct {
		bundleMaxSize, want int64
	}{
		{0, 2*config.DefaultBundleMaxSize + 16<<20},
		{32 << 20, 80 << 20},
		{1 << 20, 64 << 20},
		{256 << 20, 528 << 20},
	} {
		if got := MaxRequestBytes(tc.bundleMaxSize); got != tc.want {
			t.Errorf("MaxRequestBytes(%d) = %d, want %d", tc.bundleMaxSize, got, tc.want)
		}
	}
}
