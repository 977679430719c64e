package guard

import (
	"os"
	"testing"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// isOpen says whether fd is an open descriptor of this process.
func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// A handed-off descriptor outlives the file it copies and stays open
// until godbus is done writing the reply that carries it (it retires the
// reply's serial): an ExecTerminal whose command ended before its reply
// was written sent a closed descriptor, and its caller waited for ever.
func TestAHandedOffDescriptorIsClosedOnceItsReplyIsWritten(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fd, err := HandOff(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the command ended before the reply was written
	if !isOpen(int(fd)) {
		t.Fatal("the handed-off descriptor closed with the file it copies")
	}
	gen := newSerials()
	outgoing(&dbus.Message{Type: dbus.TypeSignal, Body: []any{fd}})
	gen.RetireSerial(0)
	if !isOpen(int(fd)) {
		t.Fatal("a signal naming the number closed the handed-off descriptor")
	}
	reply := &dbus.Message{Type: dbus.TypeMethodReply, Body: []any{"command", fd}}
	outgoing(reply)
	if !isOpen(int(fd)) {
		t.Fatal("the handed-off descriptor closed before its reply was written")
	}
	gen.RetireSerial(reply.Serial())
	if isOpen(int(fd)) {
		t.Fatal("the handed-off descriptor stays open after its reply was written")
	}
}

func TestSerialsAreUniqueWhileInUse(t *testing.T) {
	gen := newSerials()
	a, b := gen.GetSerial(), gen.GetSerial()
	if a == 0 || b == 0 || a == b {
		t.Fatalf("serials %d, %d", a, b)
	}
	gen.RetireSerial(a)
	if c := gen.GetSerial(); c == a || c == b || c == 0 {
		t.Fatalf("a third serial %d after %d, %d", c, a, b)
	}
}
