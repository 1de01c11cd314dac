package bundlereader

import "testing"

// TestBundleName_FleetsNames: Bundle names are Fleet's, character for
// character (users' dependsOn names and release names depend on them). The
// first cases are the expectations of Fleet's own name tests
// (internal/names, rancher/fleet 3b2c622c), given as one GitRepo name.
func TestBundleName_FleetsNames(t *testing.T) {
	str50 := "12345678901234567890123456789012345678901234567890"
	str53 := str50 + "123"
	str63 := str50 + "1234567890123"
	for _, tt := range []struct{ repo, dir, want string }{
		{str53 + "a", ".", "12345678901234567890123456789012345678901234567-fdba4"},
		{str63 + "a", ".", "12345678901234567890123456789012345678901234567-eb12d"},
		{"long-name-test-shortpath-with@char", ".", "long-name-test-shortpath-with-char-031bab5e"},
		{"long-name-test-shortpath-with+char", ".", "long-name-test-shortpath-with-char-21c88393"},
		{"long-name-test-0.App_ ", ".", "long-name-test-0-app-5bf6b3fb"},
		{"long-name-test--App_-_12.factor", ".", "long-name-test-app-12-factor-0efbac37"},
		{"bundle.name.example.com", ".", "bundle-name-example-com-645ef821"},
		{str53[0:46] + "-1234567", ".", "1234567890123456789012345678901234567890123456-d0bce"},
		// GitRepo name and path: joined, "/" made "-".
		{"test", ".", "test"},
		{"test", "simple", "test-simple"},
		{"test", "nested/app/child", "test-nested-app-child"},
		{"repo", "multi-cluster/helm", "repo-multi-cluster-helm"},
	} {
		if got := BundleName(tt.repo, tt.dir); got != tt.want {
			t.Errorf("BundleName(%q, %q) = %q, want %q", tt.repo, tt.dir, got, tt.want)
		}
		if got := BundleName(tt.repo, tt.dir); len(got) > MaxBundleNameLength {
			t.Errorf("BundleName(%q, %q) = %q: longer than %d", tt.repo, tt.dir, got, MaxBundleNameLength)
		}
	}
	// Case and punctuation never make two directories one Bundle.
	if a, b := BundleName("test", "App"), BundleName("test", "app"); a == b {
		t.Errorf("App and app share the name %q", a)
	}
}
