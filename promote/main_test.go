package promote

import (
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestMain runs the package's tests inside the testbed: the apply and
// race tests need root (owners given away) and btrfs (a project and its
// rollback point); the others are pure and do not mind.
func TestMain(m *testing.M) { testbed.Main(m) }
