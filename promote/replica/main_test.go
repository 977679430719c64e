package replica

import (
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestMain runs the package's tests inside the testbed: the replica tests
// need root, btrfs and an sshd on a private loopback; the others are pure
// and do not mind.
func TestMain(m *testing.M) { testbed.Main(m) }
