package bundlefiles_test

import (
	"encoding/base64"
	"errors"
	"runtime"
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

func TestDecodeWithin_SizeLimits(t *testing.T) {
	limits := bundlefiles.SizeLimits{Resource: 1 << 20, Total: 3 << 20}
	mib := strings.Repeat("x", 1<<20)
	cases := []struct {
		name      string
		resources []fleet.BundleResource
		want      string // empty: no error
	}{
		{"exactly at the limits", []fleet.BundleResource{
			{Name: "a", Content: mib}, {Name: "b", Content: base64.StdEncoding.EncodeToString([]byte(mib)), Encoding: "base64"},
			{Name: "c", Content: renderertest.GzipBomb(t, 1<<20), Encoding: "base64+gz"},
		}, ""},
		{"plain resource over the limit", []fleet.BundleResource{{Name: "a", Content: mib + "x"}},
			"resources[0] (a) decodes to more than 1Mi, the limit per resource (bundleMaxResourceSize)"},
		{"base64 resource over the limit", []fleet.BundleResource{{Name: "ok"}, {Name: "b", Content: base64.StdEncoding.EncodeToString([]byte(mib + "x")), Encoding: "base64"}},
			"resources[1] (b) decodes to more than 1Mi"},
		{"gzip bomb", []fleet.BundleResource{{Name: "bomb.yaml", Content: renderertest.GzipBomb(t, 64<<20), Encoding: "base64+gz"}},
			"resources[0] (bomb.yaml) decodes to more than 1Mi, the limit per resource (bundleMaxResourceSize); split it"},
		{"all together over the total", []fleet.BundleResource{
			{Name: "a", Content: mib}, {Name: "b", Content: mib}, {Name: "c", Content: mib}, {Name: "d", Content: renderertest.GzipBomb(t, 1), Encoding: "base64+gz"},
		}, "resources[3] (d): the Bundle's resources decode to more than 3Mi together, the limit (bundleMaxSize)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := bundlefiles.DecodeWithin(tc.resources, limits)
			if tc.want == "" {
				if err != nil || len(files) != len(tc.resources) {
					t.Fatalf("got %d files, %v", len(files), err)
				}
				return
			}
			var tl *bundlefiles.TooLargeError
			if !errors.As(err, &tl) || !strings.Contains(err.Error(), tc.want) || renderertest.ReasonOf(err) != fleet.BundleTooLargeReason {
				t.Fatalf("got %v, want a BundleTooLarge error containing %q", err, tc.want)
			}
		})
	}
}

// A gzip bomb costs about the limit in memory, not its decompressed size.
func TestDecodeWithin_GzipBombAllocatesAboutTheLimit(t *testing.T) {
	bomb := []fleet.BundleResource{{Name: "bomb.yaml", Content: renderertest.GzipBomb(t, 256<<20), Encoding: "base64+gz"}}
	limits := bundlefiles.SizeLimits{Resource: 4 << 20, Total: 4 << 20}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := bundlefiles.DecodeWithin(bomb, limits)
	runtime.ReadMemStats(&after)
	if renderertest.ReasonOf(err) != fleet.BundleTooLargeReason {
		t.Fatalf("got %v", err)
	}
	// The buffers come to about twice the limit in all, plus the base64
	// decoding and the gzip state.
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a 256Mi gzip bomb against a 4Mi limit allocated %s", bundlefiles.FormatBytes(int64(allocated)))
	if allocated > uint64(2*4<<20+len(bomb[0].Content)+1<<20) {
		t.Errorf("allocated %s, want about twice the limit", bundlefiles.FormatBytes(int64(allocated)))
	}
}

func TestDecodeWithin_BadContentIsNamed(t *testing.T) {
	for _, tc := range []struct {
		r    fleet.BundleResource
		want string
	}{
		{fleet.BundleResource{Name: "x", Content: "%%%", Encoding: "base64"}, "resources[0] (x): content is not base64"},
		{fleet.BundleResource{Name: "x", Content: base64.StdEncoding.EncodeToString([]byte("plain")), Encoding: "base64+gz"}, "resources[0] (x): content is not gzip"},
		{fleet.BundleResource{Name: "x", Content: renderertest.GzipBomb(t, 100)[:20], Encoding: "base64+gz"}, "resources[0] (x): content is not"},
	} {
		_, err := bundlefiles.DecodeWithin([]fleet.BundleResource{tc.r}, bundlefiles.DefaultSizeLimits())
		if err == nil || !strings.Contains(err.Error(), tc.want) || renderertest.ReasonOf(err) != fleet.RenderFailedReason {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
