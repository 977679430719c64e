package fork_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
)

// TestMain runs the tests in the testbed, as root; without root, only
// the unit tests (TestUnit*, over hosttest and a fake pool) can run, and
// they run here as they are.
func TestMain(m *testing.M) {
	supervisortest.Main(m)
}
