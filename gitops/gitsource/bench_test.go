package gitsource

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The peak-RSS benchmark runs each fetch in a child process (this test binary, started again
// with childEnv set), which reports its own VmHWM: the peak resident set of its memory since
// exec. (The rusage of the child is no measure: Linux counts the parent's memory, which the child
// shared until exec, in its maximum.)
const (
	childEnv     = "GITSOURCE_FETCH_CHILD_URL"
	childRootEnv = "GITSOURCE_FETCH_CHILD_ROOT"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childEnv); url != "" {
		os.Exit(fetchChild(url, os.Getenv(childRootEnv)))
	}
	os.Exit(m.Run())
}

// fetchChild is the child: one Checkout of the repository's main branch, as the source
// component does it.
func fetchChild(url, root string) int {
	c, err := New(Options{Root: root, Limits: Limits{MaxFetchBytes: 4 << 30, MaxObjectBytes: objectLimit(), MaxCheckoutBytes: 4 << 30, MaxCacheBytes: 16 << 30}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	snap, err := c.Checkout(ctx, Repository{URL: url, Branch: "main"}, time.Time{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Printf("0 0 %d\n", vmHWM())
		return 1
	}
	defer snap.Close()
	st := c.Stats()
	fmt.Printf("%d %d %d\n", st.FetchedBytes, st.DiskBytes, vmHWM())
	return 0
}

// vmHWM is this process's peak resident set size in bytes (/proc/self/status), 0 if unknown.
func vmHWM() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// objectLimit is MaxObjectBytes for the benchmark: GITSOURCE_BENCH_MAX_OBJECT_MIB, else 4 GiB
// (so a large file is measured, not refused).
func objectLimit() int64 {
	if v, err := strconv.Atoi(os.Getenv("GITSOURCE_BENCH_MAX_OBJECT_MIB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 4 << 30
}

// BenchmarkCheckout_LargeRepositoryPeakRSS fetches and checks out a repository of
// GITSOURCE_BENCH_MIB MiB (default 128) of incompressible files of GITSOURCE_BENCH_FILE_MIB MiB
// each (default 1) and reports the child process's peak RSS. Run it with:
//
//	go test -run '^$' -bench LargeRepositoryPeakRSS -benchtime 1x ./gitops/gitsource/
func BenchmarkCheckout_LargeRepositoryPeakRSS(b *testing.B) {
	mib := 128
	if v, err := strconv.Atoi(os.Getenv("GITSOURCE_BENCH_MIB")); err == nil && v > 0 {
		mib = v
	}
	fileMiB := 1
	if v, err := strconv.Atoi(os.Getenv("GITSOURCE_BENCH_FILE_MIB")); err == nil && v > 0 {
		fileMiB = v
	}
	s := newBenchServer(b, mib, fileMiB)
	var peak int64
	for b.Loop() {
		root := b.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+s.url(), childRootEnv+"="+root)
		out, err := cmd.Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) && os.Getenv("GITSOURCE_BENCH_MAX_OBJECT_MIB") != "" {
			// A limit set on purpose: the refusal's cost is what is measured.
			b.Logf("refused: %s", exit.Stderr)
			b.ReportMetric(1, "refused")
		} else if err != nil {
			b.Fatalf("child: %v: %s", err, out)
		}
		var fetched, disk, rss int64
		if _, err := fmt.Sscan(string(out), &fetched, &disk, &rss); err != nil || rss == 0 {
			b.Fatalf("child output %q: %v", out, err)
		}
		peak = max(peak, rss)
		b.ReportMetric(float64(fetched)/(1<<20), "fetched-MiB")
		b.ReportMetric(float64(disk)/(1<<20), "disk-MiB")
		_ = os.RemoveAll(root)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(mib), "repo-MiB")
	b.ReportMetric(float64(fileMiB), "file-MiB")
}

// newBenchServer is a served repository of mib MiB of random bytes in files of fileMiB MiB.
func newBenchServer(b *testing.B, mib, fileMiB int) *server {
	b.Helper()
	s := newServer(b, serverOptions{})
	buf := make([]byte, fileMiB<<20)
	zeros := os.Getenv("GITSOURCE_BENCH_ZEROS") != "" // compressible: a small pack of large files
	for i := range max(1, mib/fileMiB) {
		if _, err := rand.Read(buf); err != nil {
			b.Fatal(err)
		}
		if zeros {
			clear(buf)
		}
		p := filepath.Join(s.work, fmt.Sprintf("dir%02d", i%16), fmt.Sprintf("f%04d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s.commitWork()
	return s
}
