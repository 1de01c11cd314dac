package bundlereader

import (
	"crypto/md5" //nolint:gosec // names, not security: Fleet's hash, kept for equal names
	"encoding/hex"
	"path"
	"regexp"
	"strings"
)

// MaxBundleNameLength is the longest Bundle name fleet apply derives: a
// Helm release name (Helm's limit, 53), since the name is the default
// release name.
const MaxBundleNameLength = 53

var (
	disallowedChars = regexp.MustCompile(`[^a-zA-Z0-9-]+`)
	releaseName     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabel        = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dashes          = regexp.MustCompile(`-+`)
)

// BundleName is the name Fleet's fleet apply gives the Bundle of directory
// dir (relative to the checkout, "." for its root) of GitRepo repo: the two
// joined with "/", every "/" made "-"; a name that had upper case or other
// characters than [a-zA-Z0-9-] gets "-" and 8 hex digits of the md5 of the
// joined name (so "A" and "a" stay apart) before it is lower-cased and
// cleaned; over 53 characters it is cut to 47, "-" and 5 hex digits of the
// md5 of the long name. Users' dependsOn and release names rely on these
// names: they must stay Fleet's.
func BundleName(repo, dir string) string {
	s := path.Join(repo, dir)
	orig := s
	s = strings.ReplaceAll(s, "/", "-")
	if s != strings.ToLower(s) || disallowedChars.MatchString(s) {
		s = s + "-" + md5Hex(s, 8)
	}
	s = strings.ToLower(s)
	s = disallowedChars.ReplaceAllLiteralString(s, "-")
	s = dashes.ReplaceAllString(s, "-")
	s = strings.Trim(s, "-")
	if releaseName.MatchString(s) && dnsLabel.MatchString(s) {
		return limit(s, MaxBundleNameLength)
	}
	// Nothing usable is left (only punctuation): a hash of the input.
	return md5Hex(orig, 24)
}

// limit cuts s to count characters, ending with "-" and 5 hex digits of the
// md5 of s (without the "-" when the cut already ends with one).
func limit(s string, count int) string {
	const hexLen = 5
	if len(s) <= count {
		return s
	}
	keep := count - hexLen - 1
	sep := "-"
	if s[keep-1] == '-' {
		sep = ""
	}
	return s[:keep] + sep + md5Hex(s, hexLen)
}

func md5Hex(s string, n int) string {
	sum := md5.Sum([]byte(s)) //nolint:gosec // see the import
	return hex.EncodeToString(sum[:])[:n]
}
