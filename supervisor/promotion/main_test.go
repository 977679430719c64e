package promotion_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/tests/testbed"
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

func (e *env) volumes(t *testing.T) []string {
	t.Helper()
	vols, err := e.fs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names
}

// runAs runs script in sandbox id as uid (0: as root), and returns its
// output and result.
func runAs(t *testing.T, cmds *commands.Commands, id string, uid uint32, script string) (string, nsinit.Result) {
	t.Helper()
	null, w, collect := testbed.Capture(t)
	cmd, err := cmds.Exec(ctx, id, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", script}, UID: uid, AsRoot: uid == 0, Stdio: []*os.File{null, w, w}, Timeout: 30 * time.Second,
	})
	out := collect()
	if err != nil {
		t.Fatalf("running %q: %v", script, err)
	}
	return out, cmd.Result()
}
