package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
)

// An error of any length (a long path, a long program name) reaches the
// daemon as an error, not as "the init is not running": its reply fits
// the buffer the daemon reads it into.
func TestErrorRepliesFitTheDaemonsBuffer(t *testing.T) {
	for _, text := range []string{
		strings.Repeat("x", 10_000),
		strings.Repeat("\x01", 10_000), // six bytes each in JSON
		strings.Repeat("é", 5_000),
	} {
		m := errorMessage(errors.New(text))
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > smallMessage {
			t.Errorf("a reply of %d bytes; the daemon reads at most %d", len(b), smallMessage)
		}
		if !utf8.ValidString(m.Error) || !strings.HasSuffix(m.Error, "... (cut)") {
			t.Errorf("cut error %q...: want valid UTF-8 ending in the mark", m.Error[:20])
		}
	}
	if m := errorMessage(errors.New("short")); m.Error != "short" {
		t.Errorf("a short error became %q", m.Error)
	}
}

// A request is read whole, with its descriptors, in a buffer of its own
// size; one over maxMessage is refused; the end of the peer is io.EOF.
func TestRequestsAreReadAtTheirSize(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	defer conns[1].Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, size := range []int{100 << 10, 10} {
		big := message{Request: &Request{Argv: []string{"sh", "-c", strings.Repeat("x", size)}}}
		if err := writeMessage(conns[0], big, []*os.File{null}); err != nil {
			t.Fatal(err)
		}
		m, files, err := readMessage(conns[1], maxMessage)
		if err != nil || m.Request == nil || len(m.Request.Argv[2]) != size || len(files) != 1 {
			t.Fatalf("a request of %d bytes with a descriptor: %v, %d files, %v", size, m.Request != nil, len(files), err)
		}
		closeAll(files)
	}
	// Over what the reader takes (a smaller bound here; the socket's
	// buffer keeps a sender under maxMessage): refused, not cut.
	if err := writeMessage(conns[0], message{Error: strings.Repeat("x", 2*smallMessage)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readMessage(conns[1], smallMessage+1); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a message over the bound: %v; want it refused", err)
	}
	conns[0].Close()
	if _, _, err := readMessage(conns[1], maxMessage); !errors.Is(err, io.EOF) {
		t.Errorf("after the peer closed: %v; want io.EOF", err)
	}
}

// A program that is not there, or cannot be run, reaches the daemon as
// such (the sentinels a shell's 127 and 126 follow), and as ErrCommand.
func TestUnitStartErrorsSayWhyAcrossTheSocket(t *testing.T) {
	_, lerr := lookPath("nosuch-program", t.TempDir(), []string{"PATH=" + t.TempDir()})
	noexec := fmt.Errorf("starting /x in /: %w", whyNotStarted(syscall.EACCES, "/x", "/", creds.Identity{}))
	for _, c := range []struct {
		err  error
		want error
	}{{lerr, ErrNoProgram}, {noexec, ErrNotExecutable}, {errors.New("bad directory"), nil}} {
		b, err := json.Marshal(errorMessage(c.err))
		if err != nil {
			t.Fatal(err)
		}
		var m message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		got := startError(m)
		if !errors.Is(got, ErrCommand) || !strings.Contains(got.Error(), c.err.Error()) {
			t.Errorf("%v came back as %v; want ErrCommand with its text", c.err, got)
		}
		for _, s := range []error{ErrNoProgram, ErrNotExecutable} {
			if errors.Is(got, s) != (s == c.want) {
				t.Errorf("%v came back as %v: errors.Is(%v) = %v", c.err, got, s, errors.Is(got, s))
			}
		}
	}
}
