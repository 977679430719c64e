package fileserve

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A caller's pipe that stays empty ends a stream after streamIdle, also
// when the caller made it non-blocking before passing it (an *os.File of
// such a descriptor waits in Go's poller, with no deadline).
func TestAnIdlePipeEndsTheStreamWhateverItsFlags(t *testing.T) {
	defer func(d time.Duration) { streamIdle = d }(streamIdle)
	streamIdle = 200 * time.Millisecond
	for _, flags := range []int{0, unix.O_NONBLOCK} {
		var p [2]int
		if err := unix.Pipe2(p[:], flags|unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
		if _, err := w.Write([]byte("some")); err != nil {
			t.Fatal(err)
		}
		if err := callersPipe(r); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		done := make(chan error, 1)
		go func() {
			_, err := streamCopy(&got, r, true)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "idle") || got.String() != "some" {
				t.Errorf("flags %#x: streamCopy of an idle pipe: %v, %q", flags, err, got.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("flags %#x: streamCopy of an idle pipe still waits", flags)
		}
		r.Close()
		w.Close()
	}
}

// What the caller passes must be a pipe.
func TestOnlyAPipeIsTheCallersStream(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := callersPipe(f); err == nil || !strings.Contains(err.Error(), "not a pipe") {
		t.Errorf("callersPipe of a regular file: %v", err)
	}
}

// An edit's texts travel as they are, whatever bytes they hold.
func TestAnEditRoundTrips(t *testing.T) {
	e := EditData{Old: []byte("a\x01<&>\n"), New: []byte{}}
	var b bytes.Buffer
	if _, err := e.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 8+len(e.Old) {
		t.Errorf("the edit took %d bytes, want %d", b.Len(), 8+len(e.Old))
	}
	got, err := readEdit(&b)
	if err != nil || !bytes.Equal(got.Old, e.Old) || len(got.New) != 0 {
		t.Errorf("readEdit: %q %q %v", got.Old, got.New, err)
	}
	big := EditData{Old: bytes.Repeat([]byte("x"), MaxEditText+1)}
	b.Reset()
	_, _ = big.WriteTo(&b)
	if _, err := readEdit(&b); err == nil {
		t.Errorf("readEdit of a text over %d bytes: no error", MaxEditText)
	}
}
