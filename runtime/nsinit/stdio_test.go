package nsinit

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A terminal is refused as stdio, also once hung up (its pty's master
// closed: the slave then answers EIO, not a termios); /dev/null and
// /dev/urandom (which answers EINVAL) are taken.
func TestTerminalsAreRefusedAsStdioHungUpToo(t *testing.T) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer m.Close()
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	if err := checkOne(int(slave.Fd())); !errors.Is(err, ErrStdio) {
		t.Fatalf("a pty's slave: %v; want it refused", err)
	}
	m.Close()
	if err := checkOne(int(slave.Fd())); !errors.Is(err, ErrStdio) {
		t.Fatalf("a pty's slave, its master closed: %v; want it refused", err)
	}
	for _, dev := range []string{"/dev/null", "/dev/urandom"} {
		f, err := os.Open(dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkOne(int(f.Fd())); err != nil {
			t.Errorf("%s: %v; want it taken", dev, err)
		}
		f.Close()
	}
}
