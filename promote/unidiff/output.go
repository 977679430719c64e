package unidiff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// headerWriter writes header before the first bytes written through it,
// so that a diff with no output shows nothing.
type headerWriter struct {
	w      io.Writer
	header []byte
}

func (h *headerWriter) Write(p []byte) (int, error) {
	if err := h.flush(); err != nil {
		return 0, err
	}
	return h.w.Write(p)
}

func (h *headerWriter) flush() error {
	if h.header == nil {
		return nil
	}
	header := h.header
	h.header = nil
	_, err := h.w.Write(header)
	return err
}

// errCut is what a cutWriter returns once it stopped.
var errCut = errors.New("the diff was cut")

// cutWriter passes at most max bytes on to w, cut after a whole line,
// then a closing line.
type cutWriter struct {
	w   io.Writer
	max int64 // 0 or less: no limit
	n   int64 // bytes written to w
	// pending is the start of a line not yet written (with a limit only):
	// a cut never leaves half a line.
	pending []byte
	cut     bool
	err     error // w's first error
}

func (c *cutWriter) Write(p []byte) (int, error) {
	switch {
	case c.err != nil:
		return 0, c.err
	case c.cut:
		return 0, errCut
	case c.max <= 0:
		return c.write(p)
	}
	c.pending = append(c.pending, p...)
	if room := c.max - c.n; int64(len(c.pending)) > room {
		fits := c.pending[:room]
		if i := bytes.LastIndexByte(fits, '\n'); i >= 0 {
			if _, err := c.write(fits[:i+1]); err != nil {
				return 0, err
			}
		}
		c.pending, c.cut = nil, true
		if _, err := fmt.Fprintf(c.w, "... the diff is cut here: it is longer than %d bytes\n", c.max); err != nil {
			c.err = err
			return 0, err
		}
		return 0, errCut
	}
	if i := bytes.LastIndexByte(c.pending, '\n'); i >= 0 {
		if _, err := c.write(c.pending[:i+1]); err != nil {
			return 0, err
		}
		c.pending = append(c.pending[:0], c.pending[i+1:]...)
	}
	return len(p), nil
}

func (c *cutWriter) write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// flush writes what is left of an unfinished last line.
func (c *cutWriter) flush() error {
	if c.cut || c.err != nil || len(c.pending) == 0 {
		return c.err
	}
	_, err := c.write(c.pending)
	c.pending = nil
	return err
}
