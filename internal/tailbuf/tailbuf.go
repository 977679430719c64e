// Package tailbuf keeps the end of a command's output: the last bytes
// written, and how many were cut, for records and the bus. The commands
// room's captured runs and the promotion room's replica checks share it.
package tailbuf

import (
	"bytes"
	"fmt"
	"sync"
)

// Buffer keeps the last Max bytes written to it (by any number of
// writers), and says how many it cut.
type Buffer struct {
	Max  int
	mu   sync.Mutex
	buf  []byte
	lost int64
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.lost += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what was kept, as valid UTF-8 (it goes into records and onto
// the bus), after a line that says how much was cut, if anything was.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := string(bytes.ToValidUTF8(t.buf, []byte("?")))
	if t.lost > 0 {
		return fmt.Sprintf("[... the first %d bytes are cut ...]\n", t.lost) + kept
	}
	return kept
}
