package guard

import (
	"fmt"
	"os"
	"sync"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// A method that returns a descriptor cannot close it when it returns:
// godbus writes the reply after, and closes nothing. Closed too soon (the
// command behind an ExecTerminal's terminal ended at once), the reply
// names a closed number, the write fails and the caller waits for ever;
// or the number was reused meanwhile and the caller gets another file of
// the daemon's. HandOff gives the reply a descriptor of its own, closed
// once the reply carrying it has been written: the outgoing interceptor
// sees the reply, and the serial generator hears when godbus is done with
// it (godbus retires a reply's serial after writing it, or failing to).

// handoffs are the descriptors handed off: returned by a method, not yet
// seen in a reply (handed), and in a reply being written (sending, by the
// reply's serial).
var handoffs = struct {
	sync.Mutex
	handed  map[int]bool
	sending map[uint32][]int
}{handed: map[int]bool{}, sending: map[uint32][]int{}}

// HandOff returns a copy of f's descriptor for a method's reply, closed
// once that reply is written: f stays the caller's, to close when it
// likes. A method called with NO_REPLY_EXPECTED sends no reply: it must
// not hand off (the copy would stay open).
func HandOff(f *os.File) (dbus.UnixFD, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("copying the descriptor of %s: %w", f.Name(), err)
	}
	handoffs.Lock()
	handoffs.handed[fd] = true
	handoffs.Unlock()
	return dbus.UnixFD(fd), nil
}

// outgoing runs for every message the daemon sends, before it is
// written: a reply's handed-off descriptors are now the reply's.
func outgoing(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodReply {
		return
	}
	handoffs.Lock()
	defer handoffs.Unlock()
	if len(handoffs.handed) == 0 {
		return
	}
	for _, fd := range collectFDs(msg.Body) {
		if handoffs.handed[fd] {
			delete(handoffs.handed, fd)
			handoffs.sending[msg.Serial()] = append(handoffs.sending[msg.Serial()], fd)
		}
	}
}

// serials hands out the connection's serials as godbus's own generator
// does (the lowest unused one from the last), and closes a reply's
// handed-off descriptors when godbus retires its serial.
type serials struct {
	mu   sync.Mutex
	next uint32
	used map[uint32]bool
}

func newSerials() *serials { return &serials{next: 1, used: map[uint32]bool{0: true}} }

func (s *serials) GetSerial() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.next
	for s.used[n] {
		n++
	}
	s.used[n] = true
	s.next = n + 1
	return n
}

func (s *serials) RetireSerial(serial uint32) {
	s.mu.Lock()
	delete(s.used, serial)
	s.mu.Unlock()
	handoffs.Lock()
	fds := handoffs.sending[serial]
	delete(handoffs.sending, serial)
	handoffs.Unlock()
	closeReceived(fds)
}
