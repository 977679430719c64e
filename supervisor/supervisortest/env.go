// Package supervisortest builds a real Supervisor for tests inside the
// testbed: a btrfs pool, a project "web" holding index.html, real systemd
// scopes and a bbolt store, all removed when the test ends.
package supervisortest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/adopt"
	"github.com/sandboxd/sandboxd/supervisor/caches"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"github.com/sandboxd/sandboxd/supervisor/limits"
	"github.com/sandboxd/sandboxd/supervisor/metrics"
	"github.com/sandboxd/sandboxd/supervisor/ports"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/try"
	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// Index is the content of the project's index.html.
const Index = "<h1>web</h1>\n"

// Main is TestMain for a package that uses New: the test binary is also
// the sandboxes' init (New's InitCommand), and runs in the testbed.
func Main(m *testing.M) {
	if nsinit.IsInit() {
		nsinit.Main()
	}
	testbed.Main(m)
}

// Env is one supervisor and its parts.
type Env struct {
	Sup *supervisor.Supervisor
	// The rooms, made over Sup's Host.
	Ports *ports.Ports

	Caches *caches.Caches

	Commands *commands.Commands

	Checkpoints *checkpoints.Checkpoints

	Promotion       *promotion.Promotions
	PromotionConfig promotion.Config // its stages: its Runner is Commands

	Adoptions *adopt.Adoptions

	Try *try.Try

	Forks *fork.Forks

	Limits *limits.Limits
	// Metrics hears the audit log when the Config has one.
	Metrics *metrics.Metrics

	Config  supervisor.Config // what Sup was made with, to make another
	FS      cowfs.Backend
	Units   *units.Manager
	Store   *state.Store
	Project string // the project's path
}

var envs atomic.Int64

// New makes an Env whose pool root and project are named after prefix;
// every sandbox left at the end of the test is destroyed. Its sandboxes
// have no user namespace: root inside them is the host's.
func New(t *testing.T, prefix string, log *slog.Logger) *Env {
	t.Helper()
	return newEnv(t, prefix, log, false)
}

// NewUserNS is New with every sandbox in a user namespace of its own
// (required: the test fails where they cannot be had), over the testbed
// root's layers, so that root inside one is nobody on the host.
func NewUserNS(t *testing.T, prefix string, log *slog.Logger) *Env {
	t.Helper()
	return newEnv(t, prefix, log, true)
}

// Remake makes e.Sup anew from e.Config, for a test that changed it,
// with user namespaces probed again if e has them.
func (e *Env) Remake(t *testing.T) {
	t.Helper()
	e.Sup = supervisor.New(e.Config)
	e.makeRooms()
	if e.Config.UserNS.Mode != "" {
		if err := e.Sup.ProbeUserNS(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func newEnv(t *testing.T, prefix string, log *slog.Logger, userns bool) *Env {
	t.Helper()
	ctx := context.Background()
	tb := testbed.Require(t)
	n := envs.Add(1)
	root := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("%s-root%d", prefix, n))
	proj := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("%s-web%d", prefix, n))
	if err := dbtrfs.CreateSubVolume(proj); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "index.html"), []byte(Index), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := btrfs.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	um, err := units.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{FS: fs, Units: um, Store: store, Project: proj}
	e.Config = supervisor.Config{
		Backend:     fs,
		Units:       um,
		Store:       store,
		Projects:    map[string]string{"web": proj},
		InitCommand: []string{os.Args[0], "sandbox-init"},
		// Short: a unix socket's path has at most 107 bytes.
		RuntimeDir: fmt.Sprintf("/run/sbx-%s%d", prefix, n),
		Hidden:     []string{"/root"},
		Profiles: map[string]supervisor.Profile{
			"default": {Network: nsinit.NetworkNone},
			"trusted": {Network: nsinit.NetworkHost},
		},
		DefaultProfile: "default",
		Log:            log,
	}
	if userns {
		e.Config.UserNS = supervisor.UserNS{Mode: supervisor.UserNSRequire, RootLayers: tb.Layers,
			First: 0x80000, Count: 0x70000000 - 0x80000}
		// The init runs as the sandbox's host uid, which may not reach
		// the test binary's own directory (0700 under go test's).
		e.Config.InitCommand = []string{"/proc/self/exe", "sandbox-init"}
	}
	t.Cleanup(func() {
		var list []supervisor.Sandbox
		if e.Sup != nil { // nil: Remake failed, nothing was made
			list, _ = e.Sup.List(ctx)
		}
		for _, sb := range list {
			if err := e.Sup.Destroy(ctx, sb.ID); err != nil {
				t.Errorf("cleaning up sandbox %s: %v", sb.ID, err)
			}
		}
		store.Close()
		um.Close()
	})
	e.Remake(t)
	return e
}

// makeRooms makes e's rooms over e.Sup's Host, as the daemon does.
func (e *Env) makeRooms() {
	e.Ports = ports.New(e.Sup.Host(), ports.Config{RuntimeDir: e.Config.RuntimeDir})

	e.Caches = caches.New(e.Sup.Host(), caches.Config{}) // no caches, as before

	e.Commands = commands.New(e.Sup.Host().(commands.Host))

	e.Checkpoints = checkpoints.New(e.Sup.Host().(checkpoints.Host), checkpoints.Config{})

	pc := e.PromotionConfig
	pc.Runner = e.Commands
	e.Promotion = promotion.New(e.Sup.Host().(promotion.Host), pc)

	e.Adoptions = adopt.New(e.Sup.Host().(adopt.Host), adopt.Config{})

	e.Forks = fork.New(e.Sup.Host().(fork.Host), fork.Config{Commands: e.Commands})

	e.Try = try.New(e.Sup.Host().(try.Host), try.Config{Runner: e.Commands, Forks: e.Forks})

	e.Limits = limits.New(e.Sup.Host().(limits.Host), limits.Config{UserLimits: e.Config.UserLimits})

	e.Metrics = metrics.New(e.Sup.Host().(metrics.Host), metrics.Config{NoProcess: true})
	e.Config.Audit.Observe(e.Metrics.Audited)
}

// RunAs runs script in sandbox id through cmds as uid (0: as root), with
// a timeout of 30 s, and returns its output and result.
func RunAs(t *testing.T, cmds *commands.Commands, id string, uid uint32, script string) (string, nsinit.Result) {
	t.Helper()
	null, w, collect := testbed.Capture(t)
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))
	cmd, err := cmds.Exec(ctx, id, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", script}, UID: uid, AsRoot: uid == 0, Stdio: []*os.File{null, w, w}, Timeout: 30 * time.Second,
	})
	out := collect()
	if err != nil {
		t.Fatalf("running %q: %v", script, err)
	}
	return out, cmd.Result()
}

// Volumes are the names of b's volumes.
func Volumes(t *testing.T, b cowfs.Backend) []string {
	t.Helper()
	vols, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names
}
