package commands

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// newID is a short random id: a command's, a process's, a session's.
func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// steps times the steps of a command's start, for its journal line (as
// the core's time a create's).
type steps struct {
	last time.Time
	b    strings.Builder
}

func newSteps() *steps { return &steps{last: time.Now()} }

// mark ends the step named, which began at the last mark.
func (t *steps) mark(name string) {
	now := time.Now()
	if t.b.Len() > 0 {
		t.b.WriteByte(' ')
	}
	fmt.Fprintf(&t.b, "%s=%.2fms", name, float64(now.Sub(t.last).Microseconds())/1000)
	t.last = now
}

func (t *steps) String() string { return t.b.String() }
