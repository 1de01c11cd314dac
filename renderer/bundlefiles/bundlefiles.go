// Package bundlefiles decodes a Bundle's resources (plain, base64 or
// base64+gz) into files by path, within the size limits of the controller
// configuration: a gzip bomb costs at most the limit.
package bundlefiles

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Decode decodes a Bundle's resources into files by path, within the
// default size limits. Paths must be relative and stay inside the Bundle.
func Decode(resources []fleet.BundleResource) (map[string][]byte, error) {
	return DecodeWithin(resources, DefaultSizeLimits())
}

// DecodeWithin decodes a Bundle's resources into files by path, within
// limits. A gzipped resource is decompressed only up to the limit left, so a
// gzip bomb costs at most the limit in memory, not its decompressed size.
func DecodeWithin(resources []fleet.BundleResource, limits SizeLimits) (map[string][]byte, error) {
	files := make(map[string][]byte, len(resources))
	var total int64
	for i, r := range resources {
		name := path.Clean(r.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || name == "." {
			return nil, fmt.Errorf("resources[%d].name %q must be a relative path inside the Bundle", i, r.Name)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("resources[%d].name %q appears twice", i, r.Name)
		}
		limit, setting := limits.Resource, limitPerResource
		if left := limits.Total - total; left < limit {
			limit, setting = max(left, 0), limitTotal
		}
		data, err := decodeContent(r, limit)
		if errors.Is(err, errTooLarge) {
			return nil, &TooLargeError{Resource: fmt.Sprintf("resources[%d] (%s)", i, r.Name), Limit: limitOf(limits, setting), Setting: setting}
		}
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s): %w", i, r.Name, err)
		}
		total += int64(len(data))
		files[name] = data
	}
	return files, nil
}

// errTooLarge: the content decodes to more than the limit it was given.
var errTooLarge = errors.New("too large")

// decodeContent decodes one resource, failing with errTooLarge beyond limit
// bytes. Plain and base64 content is no larger than the Bundle object
// itself; only gzip can grow, and it is read through the limit.
func decodeContent(r fleet.BundleResource, limit int64) ([]byte, error) {
	var data []byte
	switch r.Encoding {
	case "":
		data = []byte(r.Content)
	case "base64":
		raw, err := base64.StdEncoding.DecodeString(r.Content)
		if err != nil {
			return nil, fmt.Errorf("content is not base64: %w", err)
		}
		data = raw
	case "base64+gz":
		raw, err := base64.StdEncoding.DecodeString(r.Content)
		if err != nil {
			return nil, fmt.Errorf("content is not base64: %w", err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("content is not gzip: %w", err)
		}
		defer zr.Close()
		return readAtMost(zr, limit)
	default:
		return nil, fmt.Errorf("unknown encoding %q (want empty, base64 or base64+gz)", r.Encoding)
	}
	if int64(len(data)) > limit {
		return nil, errTooLarge
	}
	return data, nil
}

// readAtMost reads r to its end, failing with errTooLarge as soon as it
// holds more than limit bytes. The buffer grows by doubling, and straight
// to limit+1 bytes once doubling would reach the limit: all buffers
// together come to about twice the limit.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(limit+1, 32<<10))
	for {
		if len(buf) == cap(buf) {
			size := int64(cap(buf)) * 2
			if size >= limit {
				size = limit + 1
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("content is not valid gzip: %w", err)
		}
	}
}
