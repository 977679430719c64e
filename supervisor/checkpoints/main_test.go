package checkpoints_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
)

// TestMain runs the tests in the testbed, as root; without root, only
// the unit tests (TestUnit*, over hosttest and a fake pool) can run, and
// they run here as they are.
func TestMain(m *testing.M) {
	supervisortest.Main(m)
}

// ctx is the daemon's own: the tests call the room as the daemon does.
var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// env is a supervisor on a fresh btrfs root with one project, "web",
// and its checkpoints room.
type env struct {
	sup     *supervisor.Supervisor
	ck      *checkpoints.Checkpoints
	cmds    *commands.Commands
	fs      cowfs.Backend
	store   *state.Store
	project string // the project's path
	cfg     supervisor.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := supervisortest.New(t, "ck", nil)
	return &env{sup: e.Sup, ck: e.Checkpoints, cmds: e.Commands, fs: e.FS, store: e.Store, project: e.Project, cfg: e.Config}
}
