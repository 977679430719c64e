package supervisor

import (
	"bytes"
	"fmt"
	"sync"
)

// tailBuffer keeps the last max bytes written to it (by any number of
// writers), and says how many it cut: a replica stage's check output
// (the commands room keeps its own for its commands').
type tailBuffer struct {
	max  int
	mu   sync.Mutex
	buf  []byte
	lost int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.lost += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what was kept, as valid UTF-8 (it goes into records and onto
// the bus), after a line that says how much was cut, if anything was.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := string(bytes.ToValidUTF8(t.buf, []byte("?")))
	if t.lost > 0 {
		return fmt.Sprintf("[... the first %d bytes are cut ...]\n", t.lost) + kept
	}
	return kept
}
