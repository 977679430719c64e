package unidiff

import (
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestMain runs the package's tests inside the testbed: the owner and
// reader tests give files to other users, which takes root.
func TestMain(m *testing.M) { testbed.Main(m) }
