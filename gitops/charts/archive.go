package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Limits bound what one chart may cost. Zero fields take the defaults.
type Limits struct {
	// Archive bounds the chart's .tgz (default 1 MiB: the chart goes into
	// a Bundle, and etcd refuses requests over about 1.5 MiB).
	Archive int64
	// Uncompressed bounds the archive's files together once decompressed
	// (default 8 MiB), Files their number (default 2000): a
	// decompression bomb stops there.
	Uncompressed int64
	Files        int
	// Index bounds a repository's index.yaml (default 32 MiB: large public
	// repositories have indexes of tens of MiB).
	Index int64
}

const (
	defaultArchive      = 1 << 20
	defaultUncompressed = 8 << 20
	defaultFiles        = 2000
	defaultIndex        = 32 << 20
)

func (l Limits) withDefaults() Limits {
	if l.Archive <= 0 {
		l.Archive = defaultArchive
	}
	if l.Uncompressed <= 0 {
		l.Uncompressed = defaultUncompressed
	}
	if l.Files <= 0 {
		l.Files = defaultFiles
	}
	if l.Index <= 0 {
		l.Index = defaultIndex
	}
	return l
}

// TooLargeError: a chart, or a repository index, over a limit.
type TooLargeError struct {
	// Chart names it (Ref.String), What says which bound: "archive",
	// "files uncompressed", "file count", "index".
	Chart, What string
	// Size is what was seen (at least; reading stops past the limit), Limit
	// the bound.
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	switch e.What {
	case "file count":
		return fmt.Sprintf("%s: the archive holds more than %d files, the limit", e.Chart, e.Limit)
	case "index":
		return fmt.Sprintf("%s: the repository's index.yaml is larger than %s, the limit", e.Chart, formatBytes(e.Limit))
	case "files uncompressed":
		return fmt.Sprintf("%s: the archive's files decompress to more than %s, the limit", e.Chart, formatBytes(e.Limit))
	}
	size := ""
	if e.Size > e.Limit {
		size = formatBytes(e.Size) + ", "
	}
	return fmt.Sprintf("%s: the chart archive is %sover the limit of %s: the chart is embedded in the Bundle, and etcd refuses objects over about 1.5 MiB; split the chart or deploy a smaller one",
		e.Chart, size, formatBytes(e.Limit))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// extract reads a chart archive within the limits into its files by path
// as the archive names them (`<chart>/Chart.yaml`, `<chart>/templates/…`),
// and loads it with Helm's loader to check it is a chart. Only regular
// files are kept; a path leaving the archive's root is an error.
func extract(what string, tgz []byte, l Limits) (map[string][]byte, *chart.Chart, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not a gzipped chart archive: %v", what, err)
	}
	defer zr.Close()
	// The tar stream itself (headers, padding, the files) is bounded too,
	// so entries that hold no data cannot grow it without end.
	stream := &boundedReader{r: zr, left: l.Uncompressed + int64(l.Files+16)*1024}
	tr := tar.NewReader(stream)
	files := map[string][]byte{}
	var total int64
	entries := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errBound) {
			return nil, nil, &TooLargeError{Chart: what, What: "files uncompressed", Limit: l.Uncompressed}
		}
		if errors.Is(err, tar.ErrInsecurePath) {
			return nil, nil, fmt.Errorf("%s: the chart archive has a file outside its root: %q", what, h.Name)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: reading the chart archive: %v", what, err)
		}
		if entries++; entries > l.Files {
			return nil, nil, &TooLargeError{Chart: what, What: "file count", Limit: int64(l.Files)}
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || name == "." {
			return nil, nil, fmt.Errorf("%s: the chart archive has a file outside its root: %q", what, h.Name)
		}
		left := l.Uncompressed - total
		if h.Size > left {
			return nil, nil, &TooLargeError{Chart: what, What: "files uncompressed", Limit: l.Uncompressed}
		}
		data, err := io.ReadAll(io.LimitReader(tr, left+1))
		if errors.Is(err, errBound) || int64(len(data)) > left {
			return nil, nil, &TooLargeError{Chart: what, What: "files uncompressed", Limit: l.Uncompressed}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: reading %s from the chart archive: %v", what, name, err)
		}
		if _, dup := files[name]; dup {
			return nil, nil, fmt.Errorf("%s: the chart archive has %s twice", what, name)
		}
		total += int64(len(data))
		files[name] = data
	}
	ch, err := load(what, files)
	if err != nil {
		return nil, nil, err
	}
	return files, ch, nil
}

// load checks the files are one chart in one top directory, as Helm
// archives are, and parses it with Helm's loader.
func load(what string, files map[string][]byte) (*chart.Chart, error) {
	var top string
	var buffered []*archive.BufferedFile
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		dir, rest, ok := strings.Cut(n, "/")
		if !ok {
			return nil, fmt.Errorf("%s: the chart archive has %s at its root; a chart archive holds one directory, the chart", what, n)
		}
		if top == "" {
			top = dir
		} else if dir != top {
			return nil, fmt.Errorf("%s: the chart archive has two top directories, %s and %s; a chart archive holds one, the chart", what, top, dir)
		}
		buffered = append(buffered, &archive.BufferedFile{Name: rest, Data: files[n]})
	}
	if top == "" {
		return nil, fmt.Errorf("%s: the chart archive is empty", what)
	}
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("%s: not a Helm chart: %v", what, err)
	}
	return ch, nil
}

var errBound = errors.New("bound reached")

// boundedReader fails with errBound once more than left bytes were read.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBound
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errBound
	}
	return n, err
}

// readAtMost reads r to its end, or fails with errBound past limit bytes.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return data, errBound
	}
	return data, nil
}
