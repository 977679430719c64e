package promotion_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
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
// and its promotion room.
type env struct {
	se      *supervisortest.Env
	sup     *supervisor.Supervisor
	cmds    *commands.Commands
	pr      *promotion.Promotions
	fs      cowfs.Backend
	project string // the project's path
	cfg     supervisor.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	se := supervisortest.New(t, "pr", nil)
	e := &env{se: se, fs: se.FS, project: se.Project, cfg: se.Config}
	e.took()
	return e
}

// remake makes the supervisor and its rooms anew, with the stages of
// e.se.PromotionConfig.
func (e *env) remake(t *testing.T) {
	t.Helper()
	e.se.Remake(t)
	e.took()
}

// took takes e.se's supervisor and rooms.
func (e *env) took() { e.sup, e.cmds, e.pr = e.se.Sup, e.se.Commands, e.se.Promotion }
