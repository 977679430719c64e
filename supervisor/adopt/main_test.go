package adopt

import (
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestMain runs the tests as root inside a testbed, as the supervisor's
// own are (a private systemd, mounts of their own); as another user, the
// unit tests alone run here (those that need root say so).
func TestMain(m *testing.M) {
	testbed.Main(m)
}
