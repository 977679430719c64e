package supervisor_test

import (
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// run runs script in sandbox id as uid 65534, and returns its output and
// result.
func run(t *testing.T, cmds *commands.Commands, id, script string) (string, nsinit.Result) {
	t.Helper()
	return supervisortest.RunAs(t, cmds, id, 65534, script)
}

// commandsOf is a commands room over sup, as the daemon makes one.
func commandsOf(sup *supervisor.Supervisor) *commands.Commands {
	return commands.New(sup.Host().(commands.Host))
}

func TestProfilesFillWhatACreateLeavesOut(t *testing.T) {
	e := newEnv(t)
	cfg := e.cfg
	cfg.Profiles = map[string]supervisor.Profile{
		"default": {Network: nsinit.NetworkNone},
		"small": {
			Limits:    units.Limits{MemoryMax: new(uint64(128 << 20)), TasksMax: new(uint64(32))},
			DiskQuota: 16 << 20, TTL: time.Hour, ReadOnlyProject: true, Hidden: []string{"/etc/hostname"},
		},
		"web": {Network: nsinit.NetworkAllowlist, Allow: []string{"example.com:443"}},
	}
	cfg.DefaultProfile = "default"
	sup := supervisor.New(cfg)
	cmds := commandsOf(sup)

	sb, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web", Profile: "small",
		Limits: units.Limits{TasksMax: new(uint64(48))}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Profile != "small" || sb.DiskQuota != 16<<20 || sb.Expires.Sub(sb.Created) != time.Hour || !sb.ReadOnlyProject || sb.Network != nsinit.NetworkNone {
		t.Errorf("a sandbox of profile small: %+v", sb.Record)
	}
	if got := string(sb.Limits); !strings.Contains(got, `"MemoryMax":134217728`) || !strings.Contains(got, `"TasksMax":48`) {
		t.Errorf("limits of profile small with the create's own TasksMax: %s", got)
	}
	out, res := supervisortest.RunAs(t, cmds, sb.ID, 0, "cat /etc/hostname | wc -c; echo x > index.html")
	if !strings.HasPrefix(out, "0\n") || res.Code == 0 || !strings.Contains(out, "Read-only file system") {
		t.Errorf("a hidden /etc/hostname and a read-only project: %v %q", res, out)
	}

	sb, err = sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Profile != "default" || sb.ReadOnlyProject || sb.Network != nsinit.NetworkNone {
		t.Errorf("a sandbox that names no profile: %+v", sb.Record)
	}
	if _, res := supervisortest.RunAs(t, cmds, sb.ID, 0, "echo x > index.html"); res.Code != 0 {
		t.Errorf("writing the project of the default profile: %v", res)
	}
	sb, err = sup.Create(ctx, supervisor.CreateOptions{Project: "web", Profile: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, cmds, sb.ID, "echo $https_proxy"); out != "http://"+supervisor.ProxyAddr+"\n" {
		t.Errorf("https_proxy in a sandbox under an allowlist: %q", out)
	}

	for _, c := range []struct {
		opts supervisor.CreateOptions
		want string
	}{
		{supervisor.CreateOptions{Profile: "nope"}, `profile "nope" is not configured`},
		{supervisor.CreateOptions{Network: "bridge"}, `network "bridge"`},
		{supervisor.CreateOptions{Network: nsinit.NetworkAllowlist}, "allowlist with nothing in it"},
		{supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{"example.com"}}, `allow entry "example.com"`},
		{supervisor.CreateOptions{Network: nsinit.NetworkNone, Allow: []string{"example.com:443"}}, "the network is \"none\""},
	} {
		c.opts.Project = "web"
		_, err := sup.Create(ctx, c.opts)
		if !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("create with %+v: %v; want ErrInvalid naming %q", c.opts, err, c.want)
		}
	}
}

func TestExecAsksForWhatTheSandboxAllows(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open("/dev/null")
	defer null.Close()
	stdio := []*os.File{null, null, null}
	for _, c := range []struct {
		what string
		o    commands.ExecOptions
		want error
	}{
		{"no command", commands.ExecOptions{UID: 1000, Stdio: stdio}, supervisor.ErrInvalid},
		// Root there would be the host's: this env makes no user namespaces.
		{"root for a user", commands.ExecOptions{Argv: []string{"true"}, UID: 1000, AsRoot: true, Stdio: stdio}, supervisor.ErrNoIdmap},
		{"no stdio", commands.ExecOptions{Argv: []string{"true"}, UID: 1000}, supervisor.ErrInvalid},
	} {
		if _, err := e.cmds.Exec(ctx, sb.ID, c.o); !errors.Is(err, c.want) {
			t.Errorf("exec with %s: %v; want %v", c.what, err, c.want)
		}
	}
	if _, err := e.cmds.Exec(ctx, "nosuchsandbox", commands.ExecOptions{Argv: []string{"true"}, Stdio: stdio}); !errors.Is(err, supervisor.ErrNotFound) {
		t.Errorf("exec in a sandbox that does not exist: %v", err)
	}
	if _, err := e.sup.Freeze(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cmds.Exec(ctx, sb.ID, commands.ExecOptions{Argv: []string{"true"}, Stdio: stdio}); !errors.Is(err, supervisor.ErrWrongState) {
		t.Errorf("exec in a frozen sandbox: %v; want ErrWrongState", err)
	}
	if _, err := e.sup.Thaw(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// A command whose sandbox is destroyed under it ends as lost.
	r, w, _ := os.Pipe()
	defer r.Close()
	cmd, err := e.cmds.Exec(ctx, sb.ID, commands.ExecOptions{Argv: []string{"sleep", "60"}, UID: 65534, Stdio: []*os.File{null, w, w}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cmd.Done():
		if res := cmd.Result(); res.How != nsinit.Lost && res.How != nsinit.Signaled {
			t.Errorf("a command whose sandbox was destroyed: %v", res)
		}
	case <-time.After(10 * time.Second):
		t.Error("a command whose sandbox was destroyed has not ended after 10s")
	}
}

// On zfs-fuse the system layer is a tmpfs: the project comes from a ZFS
// clone, bound through FUSE.
func TestASandboxOnZFS(t *testing.T) {
	tb := testbed.Require(t)
	root := fmt.Sprintf("%s/sup-zfs-%d", tb.ZFS.Pool, os.Getpid())
	fs, err := zfs.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// zfs-fuse calls a dataset busy for a moment after its last
		// clone is gone.
		var out []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, err = exec.Command("zfs", "destroy", "-r", root).CombinedOutput(); err == nil {
				return
			}
		}
		t.Errorf("zfs destroy -r %s: %v: %s", root, err, out)
	})
	if caps := fs.Info().Capabilities; caps.OverlayUpper || caps.Idmap {
		t.Fatalf("zfs-fuse (%s) reported as able to carry an overlay's upper layer or to idmap: %+v", fs.Info().Version, caps)
	}
	if err := os.WriteFile(filepath.Join(tb.ZFS.Mountpoint, "zfs-index.html"), []byte("on zfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	cfg := e.cfg
	cfg.Backend = fs
	cfg.Projects = map[string]string{"data": tb.ZFS.Project}
	cfg.Store, err = state.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Store.Close()
	// zfs-fuse cannot idmap: a daemon that requires user namespaces does
	// not start on it, one that takes them where it can makes sandboxes
	// without, and root inside them stays root's.
	cfg.UserNS = supervisor.UserNS{Mode: supervisor.UserNSRequire, RootLayers: tb.Layers, First: 0x80000, Count: 1 << 24}
	cfg.InitCommand = []string{"/proc/self/exe", "sandbox-init"}
	if err := supervisor.New(cfg).ProbeUserNS(ctx); err == nil || !strings.Contains(err.Error(), "FUSE_ALLOW_IDMAP") {
		t.Errorf("requiring user namespaces on zfs-fuse: %v; want an error naming FUSE_ALLOW_IDMAP", err)
	}
	cfg.UserNS.Mode = supervisor.UserNSAuto
	sup := supervisor.New(cfg)
	cmds := commandsOf(sup)
	if err := sup.ProbeUserNS(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := sup.Create(ctx, supervisor.CreateOptions{Project: "data", DiskQuota: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// No group quota on ZFS: the disk quota is split, the volume and the
	// tmpfs layer half each (issue 28's finding 7: each had all of it).
	if vol, err := fs.Get(ctx, sb.Volume); err != nil {
		t.Error(err)
	} else if u, err := fs.Usage(ctx, vol); err != nil || u.Quota != 32<<20 {
		t.Errorf("the ZFS sandbox's volume under --disk 64M: %+v, %v; want a quota of 32 MiB", u, err)
	}
	if out, res := supervisortest.RunAs(t, cmds, sb.ID, 0, "df -B1 --output=size / | tail -n 1"); strings.TrimSpace(out) != "33554432" {
		t.Errorf("the ZFS sandbox's system layer under --disk 64M: %v %q bytes; want 32 MiB", res, out)
	}
	if sb.Layer != "" || sb.IDs != nil {
		t.Errorf("a zfs-fuse sandbox's system layer is volume %q and its ids %+v; want a tmpfs and no user namespace", sb.Layer, sb.IDs)
	}
	_, err = cmds.Exec(ctx, sb.ID, commands.ExecOptions{Argv: []string{"true"}, UID: 1000, AsRoot: true, Stdio: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if !errors.Is(err, supervisor.ErrNoIdmap) || !strings.Contains(err.Error(), "zfs-fuse") {
		t.Errorf("root for a user in a sandbox on zfs-fuse: %v; want ErrNoIdmap naming zfs-fuse", err)
	}
	out, res := run(t, cmds, sb.ID, "cat zfs-index.html && pwd")

	if res.Code != 0 || out != "on zfs\n"+tb.ZFS.Mountpoint+"\n" {
		t.Errorf("the project in a sandbox on ZFS: %v %q", res, out)
	}
	if err := sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("destroying a sandbox on ZFS: %v", err)
	}
	if vols, _ := fs.List(ctx); len(vols) != 0 {
		t.Errorf("volumes left after destroying the ZFS sandbox: %v", vols)
	}
}
