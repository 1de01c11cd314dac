package gitsource

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// packGuard reads a fetched pack as it arrives, object by object, and refuses the first object
// whose inflated size passes the limit before go-git sees its bytes: go-git inflates each
// object in memory to index it, so a file of zeros that compresses to a few kilobytes would
// otherwise cost its whole size in memory. Sizes come from the object headers (go-git holds an
// object to its declared size) and, for deltas, from the target size at the start of the delta.
//
// Write hands each chunk to the scanning goroutine and returns only when the scanner has used
// all of it and asks for more, so nothing passes the guard unchecked.
type packGuard struct {
	max    int64
	data   chan []byte
	need   chan struct{}
	closed chan struct{}
	done   chan struct{}
	err    error // the scanner's verdict; read after done is closed
	asked  bool  // the scanner's current request for data was already received
}

func newPackGuard(max int64) *packGuard {
	g := &packGuard{
		max:    max,
		data:   make(chan []byte),
		need:   make(chan struct{}),
		closed: make(chan struct{}),
		done:   make(chan struct{}),
	}
	go func() {
		defer close(g.done)
		err := scanPack(&guardReader{g: g}, max)
		var lim *limitError
		if errors.As(err, &lim) {
			g.err = err
		}
		// Finished, or a pack the scanner cannot read: go-git's own parser judges the rest.
	}()
	return g
}

// check passes p through the scanner; an error means the pack is refused.
func (g *packGuard) check(p []byte) error {
	if !g.asked {
		select {
		case <-g.need:
		case <-g.done:
			return g.err
		}
	}
	select {
	case g.data <- p:
	case <-g.done:
		return g.err
	}
	select {
	case <-g.need:
		g.asked = true
		return nil
	case <-g.done:
		g.asked = false
		return g.err
	}
}

func (g *packGuard) close() {
	close(g.closed)
	<-g.done
}

// guardReader is the scanner's side of the handoff.
type guardReader struct {
	g   *packGuard
	cur []byte
}

func (r *guardReader) Read(b []byte) (int, error) {
	for len(r.cur) == 0 {
		select {
		case r.g.need <- struct{}{}:
		case <-r.g.closed:
			return 0, io.EOF
		}
		select {
		case r.cur = <-r.g.data:
		case <-r.g.closed:
			return 0, io.EOF
		}
	}
	n := copy(b, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func scanPack(r io.Reader, max int64) error {
	s := packfile.NewScanner(r)
	_, objects, err := s.Header()
	if err != nil {
		return err
	}
	tooLarge := func(size int64) error {
		return &limitError{msg: fmt.Sprintf("the fetch has an object of %d bytes, over the limit of %d bytes per object (MaxObjectBytes): a file this large, or one made to inflate (a compression bomb), is refused", size, max)}
	}
	for range objects {
		h, err := s.NextObjectHeader()
		if err != nil {
			return err
		}
		if h.Length > max {
			return tooLarge(h.Length)
		}
		if h.Type != plumbing.OFSDeltaObject && h.Type != plumbing.REFDeltaObject {
			continue // the next header skips it, inflating no more than its declared size
		}
		d := &deltaSize{}
		if _, _, err := s.NextObject(d); err != nil {
			return err
		}
		if d.target > max {
			return tooLarge(d.target)
		}
	}
	return nil
}

// deltaSize reads the target size from a delta's header: two little-endian base-128 numbers,
// the base's size and the target's.
type deltaSize struct {
	field, shift int
	value        int64
	target       int64
}

func (d *deltaSize) Write(p []byte) (int, error) {
	for _, b := range p {
		if d.field >= 2 {
			break
		}
		if d.shift < 63 {
			d.value |= int64(b&0x7f) << d.shift
		}
		d.shift += 7
		if b&0x80 == 0 {
			if d.field == 1 {
				d.target = d.value
			}
			d.field++
			d.value, d.shift = 0, 0
		}
	}
	return len(p), nil
}
