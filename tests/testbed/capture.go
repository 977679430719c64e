package testbed

import (
	"io"
	"os"
	"testing"
)

// Capture gives a command's stdio for a test: stdin reads /dev/null, out
// is a pipe's write end (for stdout and stderr both), and collect closes
// the test's copy of out and returns all that was written once every
// writer has closed it.
func Capture(t testing.TB) (stdin, out *os.File, collect func() string) {
	t.Helper()
	null, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close(); r.Close(); w.Close() })
	return null, w, func() string {
		w.Close()
		b, _ := io.ReadAll(r)
		return string(b)
	}
}
