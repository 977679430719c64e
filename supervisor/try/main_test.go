package try_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// TestMain runs the tests in the testbed, as root; without root, only
// the unit tests (TestUnit*, over hosttest and a fake pool and runner)
// can run, and they run here as they are.
func TestMain(m *testing.M) {
	supervisortest.Main(m)
}

// ctx is the daemon's own: the tests call the room as the daemon does.
var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// env is a supervisor on a fresh btrfs root with one project, "web",
// and its try room.
type env struct {
	sup *supervisor.Supervisor
	try *try.Try
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := supervisortest.New(t, "try", nil)
	return &env{sup: e.Sup, try: e.Try}
}
