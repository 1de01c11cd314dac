// Package renderertest holds test helpers for hostile Bundle input, shared by
// the renderer, render worker and controller tests, and the pinned helm CLIs
// the render parity tests compare with (HelmCLIs). Only tests import it.
package renderertest

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"testing"
)

// GzipBomb is n bytes of zeros, gzipped and base64-encoded, as a Bundle
// resource with encoding base64+gz carries it: a few KiB that decode to n
// bytes.
func GzipBomb(tb testing.TB, n int) string {
	tb.Helper()
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(chunk) {
		if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}
