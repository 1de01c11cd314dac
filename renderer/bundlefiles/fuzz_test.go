package bundlefiles_test

import (
	"encoding/base64"
	"errors"
	"path"
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/renderer/bundlefiles"
	"github.com/gitops-fleet/fleet/renderer/renderertest"
)

// FuzzBundleFiles decodes arbitrary resources: never a panic, and whatever
// decodes stays within the limits, with clean relative paths.
func FuzzBundleFiles(f *testing.F) {
	f.Add("cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\n"), uint8(0))
	f.Add("chart/templates/x.yaml", []byte("{{ .Values.x }}"), uint8(1))
	f.Add("big.yaml", []byte(renderertest.GzipBomb(f, 1<<20)), uint8(3))
	f.Add("../etc/passwd", []byte("x"), uint8(0))
	f.Add("a//b/../c", []byte("x"), uint8(2))
	f.Add("x", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), uint8(2))
	f.Add("x", []byte("not base64 %%"), uint8(4))
	limits := bundlefiles.SizeLimits{Resource: 64 << 10, Total: 96 << 10}
	f.Fuzz(func(t *testing.T, name string, content []byte, mode uint8) {
		r := fleet.BundleResource{Name: name}
		switch mode % 5 {
		case 0:
			r.Content = string(content)
		case 1:
			r.Content, r.Encoding = base64.StdEncoding.EncodeToString(content), "base64"
		case 2: // content is the gzip stream
			r.Content, r.Encoding = base64.StdEncoding.EncodeToString(content), "base64+gz"
		case 3: // content is already the encoded form
			r.Content, r.Encoding = string(content), "base64+gz"
		case 4:
			r.Content, r.Encoding = string(content), "base64"
		}
		// The same resource three times under different names: the total
		// limit is met before the per-resource one.
		resources := []fleet.BundleResource{r, r, r}
		resources[1].Name, resources[2].Name = "copy/"+name, "other/"+name
		files, err := bundlefiles.DecodeWithin(resources, limits)
		if err != nil {
			var tl *bundlefiles.TooLargeError
			if errors.As(err, &tl) && renderertest.ReasonOf(err) != fleet.BundleTooLargeReason {
				t.Fatalf("TooLargeError with reason %s", renderertest.ReasonOf(err))
			}
			return
		}
		var total int
		for p, data := range files {
			if len(data) > int(limits.Resource) {
				t.Fatalf("%s: %d bytes, over the per-resource limit", p, len(data))
			}
			total += len(data)
			if path.IsAbs(p) || p != path.Clean(p) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("path %q escapes the Bundle", p)
			}
		}
		if total > int(limits.Total) {
			t.Fatalf("%d bytes in all, over the total limit", total)
		}
	})
}
