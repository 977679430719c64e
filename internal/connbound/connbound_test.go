package connbound

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPin: a connection's queues are what was asked (doubled by the
// kernel), not the defaults; a connection with no descriptor is an error.
func TestPin(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := Pin(a); err == nil {
		t.Fatal("Pin of a pipe with no descriptor: no error")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Pin(c); err != nil {
		t.Fatal(err)
	}
	rc, _ := c.(*net.TCPConn).SyscallConn()
	rc.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_RCVBUF, unix.SO_SNDBUF} {
			if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt); err != nil || v != 2*SocketBuffer {
				t.Errorf("option %d: %d, %v; want %d", opt, v, err, 2*SocketBuffer)
			}
		}
	})
}

// recorder notes the size of each write.
type recorder struct {
	bytes.Buffer
	most int
}

func (r *recorder) Write(b []byte) (int, error) {
	r.most = max(r.most, len(b))
	return r.Buffer.Write(b)
}

// TestCopyUsesItsOwnBuffer: Copy writes at most CopyBuffer at once, even
// from a reader with WriteTo (which io.Copy would use with its own size).
func TestCopyUsesItsOwnBuffer(t *testing.T) {
	src := strings.Repeat("x", 5*CopyBuffer+7)
	var dst recorder
	n, err := Copy(&dst, strings.NewReader(src))
	if err != nil || n != int64(len(src)) || dst.String() != src {
		t.Fatalf("Copy: %d, %v; want %d bytes copied", n, err, len(src))
	}
	if dst.most > CopyBuffer {
		t.Errorf("a write of %d bytes; want at most %d", dst.most, CopyBuffer)
	}
	if _, err := Copy(io.Discard, iotestErr{}); err == nil {
		t.Error("a read error was not returned")
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// TestCounter: an owner's connections stop at perOwner, everyone's at
// total; each release gives its place back once.
func TestCounter(t *testing.T) {
	var c Counter
	var releases []func()
	for range 3 {
		release, _, _, _ := c.Admit(1000, 3, 5)
		if release == nil {
			t.Fatalf("connection %d of uid 1000 refused", len(releases)+1)
		}
		releases = append(releases, release)
	}
	if release, _, own, why := c.Admit(1000, 3, 5); release != nil || own != 3 || why != OwnerFull {
		t.Fatalf("a 4th connection of uid 1000: %v, %d open, %v; want refused by its owner's cap", release != nil, own, why)
	}
	releases[0]()
	releases[0]() // once only
	if release, _, _, _ := c.Admit(1000, 3, 5); release == nil {
		t.Fatal("refused after one release")
	}
	if release, _, _, _ := c.Admit(1000, 3, 5); release != nil {
		t.Fatal("a second release gave a second place back")
	}
	for range 2 {
		if release, _, _, _ := c.Admit(1, 3, 5); release == nil {
			t.Fatalf("uid 1 refused with %d open in all", c.Total())
		}
	}
	if release, open, _, why := c.Admit(2, 3, 5); release != nil || open != 5 || why != AllFull {
		t.Fatalf("past 5 in all: %v, %d open, %v; want refused by the cap in all", release != nil, open, why)
	}
}

// TestCounterKeepsTheLastQuarterForSmallOwners: once three quarters of the
// total are open, an owner with FairShare open is refused, one with fewer
// is not, until the total.
func TestCounterKeepsTheLastQuarterForSmallOwners(t *testing.T) {
	var c Counter
	const perOwner, total = 64, 128
	for range perOwner {
		if release, _, _, why := c.Admit(1, perOwner, total); release == nil {
			t.Fatalf("uid 1 refused with %d open: %v", c.Total(), why)
		}
	}
	for range total*3/4 - perOwner {
		if release, _, _, why := c.Admit(2, perOwner, total); release == nil {
			t.Fatalf("uid 2 refused with %d open: %v", c.Total(), why)
		}
	}
	if release, _, own, why := c.Admit(2, perOwner, total); release != nil || why != Reserved || own != total*3/4-perOwner {
		t.Fatalf("uid 2 with %d open, past three quarters: %v, %v; want refused: the rest is reserved", total*3/4-perOwner, release != nil, why)
	}
	for uid := uint32(3); c.Total() < total; uid++ {
		for n := 0; n < FairShare && c.Total() < total; n++ {
			if release, _, _, why := c.Admit(uid, perOwner, total); release == nil {
				t.Fatalf("uid %d with %d of its own refused in the reserve: %v", uid, n, why)
			}
		}
		if c.Total() < total {
			if release, _, _, why := c.Admit(uid, perOwner, total); release != nil || why != Reserved {
				t.Fatalf("uid %d took more than FairShare of the reserve: %v", uid, why)
			}
		}
	}
	if release, _, _, why := c.Admit(99, perOwner, total); release != nil || why != AllFull {
		t.Fatalf("past the total: %v, %v; want AllFull", release != nil, why)
	}
}
