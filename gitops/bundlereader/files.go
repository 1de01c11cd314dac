package bundlereader

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// loader reads the files of one Bundle directory as Fleet's fleet apply
// puts them into the Bundle: every file below it, except hidden files and
// directories (a name starting with "."), what .fleetignore files leave
// out, and the files fleet apply reads itself (the fleet.yaml, values
// files). Subdirectories with their own fleet.yaml stay in, as in Fleet
// (the renderer leaves them out of plain manifests). Symbolic links are
// followed when they stay inside the directory.
type loader struct {
	ctx     context.Context
	dir     string // on disk
	rel     string // relative to the checkout, for errors
	exclude map[string]bool
	limits  Limits
	files   map[string][]byte
	total   int64
}

func (l *loader) load() (map[string][]byte, error) {
	l.files = map[string][]byte{}
	if err := l.walk("", nil, 0); err != nil {
		return nil, err
	}
	return l.files, nil
}

func (l *loader) walk(rel string, patterns []string, depth int) error {
	if depth > 64 {
		return fmt.Errorf("%s: directories nested deeper than 64 levels", path.Join(l.rel, rel))
	}
	abs := filepath.Join(l.dir, filepath.FromSlash(rel))
	own, err := readFleetIgnore(filepath.Join(abs, ".fleetignore"))
	if err != nil {
		return fmt.Errorf("%s: %w", path.Join(l.rel, rel, ".fleetignore"), err)
	}
	// A directory's patterns apply to its entries and below, never to its
	// siblings: a fresh slice per directory.
	patterns = append(append([]string(nil), patterns...), own...)
	entries, err := os.ReadDir(abs)
	if err != nil {
		return err
	}
	if err := l.ctx.Err(); err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		p := path.Join(rel, name)
		if strings.HasPrefix(name, ".") || ignored(patterns, name, e.IsDir()) || l.exclude[p] {
			continue
		}
		switch {
		case e.IsDir():
			if err := l.walk(p, patterns, depth+1); err != nil {
				return err
			}
		case e.Type()&os.ModeSymlink != 0:
			if err := l.readLink(p); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := l.read(p, filepath.Join(abs, name)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is not a regular file", path.Join(l.rel, p))
		}
	}
	return nil
}

// readLink reads the target of symbolic link p, which must be a file inside
// the Bundle directory (Fleet's rule).
func (l *loader) readLink(p string) error {
	shown := path.Join(l.rel, p)
	target, err := filepath.EvalSymlinks(filepath.Join(l.dir, filepath.FromSlash(p)))
	if err != nil {
		return fmt.Errorf("%s: symbolic link: %w", shown, err)
	}
	root, err := filepath.EvalSymlinks(l.dir)
	if err != nil {
		return err
	}
	if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s: symbolic link to outside the Bundle's directory", shown)
	}
	st, err := os.Stat(target)
	if err != nil {
		return fmt.Errorf("%s: symbolic link: %w", shown, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: symbolic link to a directory or special file; only links to files are followed", shown)
	}
	return l.read(p, target)
}

func (l *loader) read(p, abs string) error {
	if len(l.files) >= l.limits.Files {
		return fmt.Errorf("more than %d files; leave some out with .fleetignore or split the directory", l.limits.Files)
	}
	data, err := readLimited(abs, l.limits.FileBytes)
	if err != nil {
		return fmt.Errorf("%s: %w", path.Join(l.rel, p), err)
	}
	l.total += int64(len(data))
	if l.total > l.limits.PathBytes {
		return fmt.Errorf("its files are larger than %s together; leave some out with .fleetignore or split the directory", formatBytes(l.limits.PathBytes))
	}
	l.files[p] = data
	return nil
}

// readLimited reads a file of at most limit bytes.
func readLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %s, the limit of one file", formatBytes(limit))
	}
	return data, nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

var trailingSpace = regexp.MustCompile(`([^\\])\s+$`)

// readFleetIgnore reads a .fleetignore: one pattern a line, "#" comments,
// trailing spaces dropped unless escaped. None: no patterns.
func readFleetIgnore(name string) ([]string, error) {
	if st, err := os.Lstat(name); err == nil && !st.Mode().IsRegular() {
		return nil, errors.New("must be a file, not a symbolic link or directory")
	}
	data, err := readLimited(name, 1<<20)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := trailingSpace.ReplaceAllString(sc.Text(), "$1")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

// ignored applies .fleetignore patterns as Fleet does: a pattern matches
// an entry's name (filepath.Match, not a path), and "dir/*" leaves out the
// directory named dir.
func ignored(patterns []string, name string, isDir bool) bool {
	for _, p := range patterns {
		if len(p) > 2 && strings.HasSuffix(p, "/*") {
			if isDir && strings.TrimSuffix(p, "/*") == name {
				return true
			}
			continue
		}
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	return false
}
