package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/units"
)

func TestMain(m *testing.M) { supervisortest.Main(m) }

// ctx is the daemon's own: the tests call the supervisor as it does.
var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// env is one supervisor on a fresh btrfs root with one project, "web".
type env struct {
	sup     *supervisor.Supervisor
	cmds    *commands.Commands // sup's commands room
	fs      cowfs.Backend
	units   *units.Manager
	store   *state.Store
	project string // the project's path
	cfg     supervisor.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := supervisortest.New(t, "sup", nil)
	return &env{sup: e.Sup, cmds: e.Commands, fs: e.FS, units: e.Units, store: e.Store, project: e.Project, cfg: e.Config}
}

// scopeActive says whether the sandbox's scope runs.
func (e *env) scopeActive(t *testing.T, unit string) bool {
	t.Helper()
	list, err := e.units.List(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	return len(list) == 1 && list[0].ActiveState == "active"
}

func TestCreateMakesAWritableCopyOfTheProject(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{
		Project: "web", Owner: 1000, TTL: time.Hour,
		Limits: units.Limits{MemoryMax: new(uint64(256 << 20)), TasksMax: new(uint64(64))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state.Ready || sb.Owner != 1000 || sb.Project != "web" || sb.Expires.Sub(sb.Created) != time.Hour {
		t.Fatalf("created %+v", sb)
	}
	data, err := os.ReadFile(filepath.Join(sb.Path, "index.html"))
	if err != nil || string(data) != "<h1>web</h1>\n" {
		t.Fatalf("the sandbox's copy of index.html: %q, %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(sb.Path, "index.html"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(e.project, "index.html")); string(data) != "<h1>web</h1>\n" {
		t.Fatalf("the project changed with its sandbox: %q", data)
	}
	if !e.scopeActive(t, sb.Unit) {
		t.Fatalf("scope %s is not running", sb.Unit)
	}
	u, err := e.units.Usage(ctx, sb.Unit)
	if err != nil || u.Limits.MemoryMax == nil || *u.Limits.MemoryMax != 256<<20 {
		t.Fatalf("the scope's limits: %+v, %v; want MemoryMax 256M", u.Limits, err)
	}
	got, err := e.sup.Get(ctx, sb.ID)
	if err != nil || got.Path != sb.Path {
		t.Fatalf("Get = %+v, %v", got, err)
	}

	if err := e.sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sup.Get(ctx, sb.ID); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("Get after Destroy: %v; want ErrNotFound", err)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 0 {
		t.Fatalf("volumes after Destroy: %v", vols)
	}
	if e.scopeActive(t, sb.Unit) {
		t.Fatalf("scope %s still runs after Destroy", sb.Unit)
	}
	if err := e.sup.Destroy(ctx, sb.ID); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("second Destroy: %v; want ErrNotFound", err)
	}
}

func TestBadOptionsChangeNothing(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		opts supervisor.CreateOptions
		want error
		says string
	}{
		{supervisor.CreateOptions{Project: "nope"}, supervisor.ErrUnknownProject, "nope"},
		{supervisor.CreateOptions{Project: "../web"}, supervisor.ErrUnknownProject, "../web"},
		{supervisor.CreateOptions{Project: "web", TTL: -time.Second}, supervisor.ErrInvalid, "negative"},
		{supervisor.CreateOptions{Project: "web", Limits: units.Limits{MemoryMax: new(uint64(0))}}, supervisor.ErrInvalid, "MemoryMax"},
	}
	for _, c := range cases {
		_, err := e.sup.Create(ctx, c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Create(%+v): %v; want %v saying %q", c.opts, err, c.want, c.says)
		}
	}
	if list, _ := e.sup.List(ctx); len(list) != 0 {
		t.Fatalf("records after refused creates: %v", list)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 0 {
		t.Fatalf("volumes after refused creates: %v", vols)
	}
}

func TestAFailedCreateIsUndone(t *testing.T) {
	e := newEnv(t)
	cfg := e.cfg
	cfg.InitCommand = []string{"/nonexistent/init"}
	sup := supervisor.New(cfg)
	_, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err == nil || !strings.Contains(err.Error(), "init") {
		t.Fatalf("Create with an init that cannot start: %v", err)
	}
	e.nothingLeft(t, sup)
}

// nothingLeft fails t if any record, volume or scope of a sandbox is left.
func (e *env) nothingLeft(t *testing.T, sup *supervisor.Supervisor) {
	t.Helper()
	if list, _ := sup.List(ctx); len(list) != 0 {
		t.Fatalf("records left: %v", list)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 0 {
		t.Fatalf("volumes left: %v", vols)
	}
	if scopes, _ := e.units.List(ctx, "sandbox-*.scope"); len(scopes) != 0 {
		t.Fatalf("scopes left: %v", scopes)
	}
}

// failingSnapshots is the real backend whose writable snapshots fail:
// a create that fails once its init runs and its scope is starting.
type failingSnapshots struct{ cowfs.Backend }

func (f failingSnapshots) Snapshot(ctx context.Context, src cowfs.Volume, name string, readOnly bool) (cowfs.Volume, error) {
	if !readOnly {
		return cowfs.Volume{}, errors.New("the disk said no")
	}
	return f.Backend.Snapshot(ctx, src, name, readOnly)
}

// A create that fails after its init was launched (and its scope begun,
// beside the snapshots) leaves no scope, process, volume or record.
func TestACreateFailingMidWayLeavesNoScope(t *testing.T) {
	e := newEnv(t)
	cfg := e.cfg
	cfg.Backend = failingSnapshots{cfg.Backend}
	sup := supervisor.New(cfg)
	_, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err == nil || !strings.Contains(err.Error(), "the disk said no") {
		t.Fatalf("Create whose volume cannot be made: %v", err)
	}
	e.nothingLeft(t, sup)
	// The control: the same backend's read-only snapshots work, and so
	// does a create through the real one.
	sb, err := supervisor.New(e.cfg).Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatalf("a create through the real backend: %v", err)
	}
	if scopes, _ := e.units.List(ctx, "sandbox-*.scope"); len(scopes) != 1 || scopes[0].Name != sb.Unit {
		t.Fatalf("scopes after a create: %v; want %s", scopes, sb.Unit)
	}
}

func TestReconcileFinishesWhatACrashLeft(t *testing.T) {
	e := newEnv(t)
	create := func() supervisor.Sandbox {
		sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	consistent := create()
	rebooted := create() // frozen, then its scope gone, as after a reboot
	if _, err := e.sup.Freeze(ctx, rebooted.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.units.Stop(ctx, rebooted.Unit); err != nil {
		t.Fatal(err)
	}
	interrupted := create() // a destroy that stopped after writing its intent
	if _, err := e.store.Update(interrupted.ID, func(r *state.Record) error { r.State = state.Destroying; return nil }); err != nil {
		t.Fatal(err)
	}
	// A create that stopped after its base snapshot.
	half := state.Record{ID: "0123456789ab", Project: "web", State: state.Creating, Base: "base-0123456789ab", Volume: "sb-0123456789ab", Unit: "sandbox-0123456789ab.scope", Created: time.Now()}
	if err := e.store.Create(half); err != nil {
		t.Fatal(err)
	}
	proj, err := e.fs.Project(ctx, e.project)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Snapshot(ctx, proj, half.Base, true); err != nil {
		t.Fatal(err)
	}
	// Orphans: a volume and a scope of sandboxd's that no record names,
	// and a volume of the user's that must stay.
	orphanBase, err := e.fs.Snapshot(ctx, proj, "base-ffffffffffff", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Snapshot(ctx, orphanBase, "sb-ffffffffffff", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Create(ctx, "keepme"); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("/bin/sleep", "infinity")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = sleeper.Wait() }()
	if err := e.units.StartScope(ctx, units.Scope{Name: "sandbox-eeeeeeeeeeee.scope", PIDs: []int{sleeper.Process.Pid}}); err != nil {
		t.Fatal(err)
	}

	// The daemon starts again.
	sup := supervisor.New(e.cfg)
	rep, err := sup.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := supervisor.Report{
		Adopted:       []string{consistent.ID},
		Restarted:     []string{rebooted.ID},
		Undone:        []string{half.ID},
		Finished:      []string{interrupted.ID},
		OrphanVolumes: []string{"sb-ffffffffffff", "base-ffffffffffff"},
		OrphanScopes:  []string{"sandbox-eeeeeeeeeeee.scope"},
	}
	if fmt.Sprint(rep) != fmt.Sprint(want) {
		t.Fatalf("Reconcile report:\n got %+v\nwant %+v", rep, want)
	}

	// What the user sees: the two live sandboxes work, nothing else is left.
	for _, sb := range []supervisor.Sandbox{consistent, rebooted} {
		got, err := sup.Get(ctx, sb.ID)
		if err != nil || got.State != state.Ready {
			t.Fatalf("sandbox %s after reconcile: %+v, %v", sb.ID, got, err)
		}
		if _, err := os.Stat(filepath.Join(got.Path, "index.html")); err != nil {
			t.Fatalf("sandbox %s's files after reconcile: %v", sb.ID, err)
		}
		if !e.scopeActive(t, sb.Unit) {
			t.Fatalf("sandbox %s's scope is not running after reconcile", sb.ID)
		}
	}
	vols := supervisortest.Volumes(t, e.fs)
	slices.Sort(vols)
	wantVols := []string{"base-" + consistent.ID, "base-" + rebooted.ID, "keepme", "sb-" + consistent.ID, "sb-" + rebooted.ID,
		"sys-" + consistent.ID, "sys-" + rebooted.ID}
	slices.Sort(wantVols)
	if !slices.Equal(vols, wantVols) {
		t.Fatalf("volumes after reconcile: %v; want %v", vols, wantVols)
	}
	scopes, _ := e.units.List(ctx, "sandbox-*.scope")
	if len(scopes) != 2 {
		t.Fatalf("scopes after reconcile: %v; want the two live sandboxes'", scopes)
	}
	// A second reconcile finds everything consistent.
	rep, err = sup.Reconcile(ctx)
	if err != nil || len(rep.Adopted) != 2 || len(rep.Restarted)+len(rep.Undone)+len(rep.Finished)+len(rep.OrphanVolumes)+len(rep.OrphanScopes) != 0 {
		t.Fatalf("second Reconcile: %+v, %v; want two adopted and nothing else", rep, err)
	}
	if err := e.fs.Delete(ctx, mustGet(t, e.fs, "keepme")); err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, fs cowfs.Backend, name string) cowfs.Volume {
	t.Helper()
	v, err := fs.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// procStates reads the state letter (R, S, T, ...) of every process in a
// scope, from the cgroup systemd keeps it in.
func procStates(t *testing.T, unit string) []string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-P", "ControlGroup", unit).Output()
	if err != nil {
		t.Fatal(err)
	}
	cg := strings.TrimSpace(string(out))
	var data []byte
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
		if data, err = os.ReadFile(filepath.Join(root, cg, "cgroup.procs")); err == nil {
			break
		}
	}
	var states []string
	for _, pid := range strings.Fields(string(data)) {
		stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		states = append(states, s[strings.LastIndexByte(s, ')')+2:][:1])
	}
	if len(states) == 0 {
		t.Fatalf("no processes in %s (%s)", unit, cg)
	}
	return states
}

func TestFreezeStopsTheSandboxAndThawResumesIt(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.sup.Thaw(ctx, sb.ID); !errors.Is(err, supervisor.ErrWrongState) || !strings.Contains(err.Error(), "ready") {
		t.Fatalf("Thaw of a ready sandbox: %v; want ErrWrongState naming its state", err)
	}
	frozen, err := e.sup.Freeze(ctx, sb.ID)
	if err != nil || frozen.State != state.Frozen {
		t.Fatalf("Freeze = %+v, %v", frozen, err)
	}
	for _, st := range procStates(t, sb.Unit) {
		if st != "T" {
			t.Fatalf("a process of the frozen sandbox is in state %s; want T (stopped)", st)
		}
	}
	if _, err := e.sup.Freeze(ctx, sb.ID); !errors.Is(err, supervisor.ErrWrongState) {
		t.Fatalf("Freeze of a frozen sandbox: %v; want ErrWrongState", err)
	}
	thawed, err := e.sup.Thaw(ctx, sb.ID)
	if err != nil || thawed.State != state.Ready {
		t.Fatalf("Thaw = %+v, %v", thawed, err)
	}
	for _, st := range procStates(t, sb.Unit) {
		if st == "T" {
			t.Fatal("a process of the thawed sandbox is still stopped")
		}
	}
}

// threads counts this process's OS threads.
func threads(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// children lists this process's child pids and their states.
func children(t *testing.T) map[string]string {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	self := fmt.Sprint(os.Getpid())
	out := map[string]string{}
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == self {
			out[e.Name()] = f[0]
		}
	}
	return out
}

func TestLiveSandboxesCostNoThreadsAndLeaveNoZombies(t *testing.T) {
	e := newEnv(t)
	before := threads(t)
	var ids []string
	for range 20 {
		sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if grew := threads(t) - before; grew > 5 {
		t.Fatalf("20 live sandboxes took %d more threads; want none per sandbox", grew)
	}
	for _, id := range ids {
		if err := e.sup.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		zombies := 0
		for _, st := range children(t) {
			if st == "Z" {
				zombies++
			}
		}
		if zombies == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d destroyed sandboxes' inits are left as zombies", zombies)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInspectTellsStalenessAndUsage(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", DiskQuota: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.sup.Inspect(ctx, sb.ID, supervisor.LiveAll)
	if err != nil {
		t.Fatal(err)
	}
	if in.Staleness != supervisor.Current {
		t.Fatalf("staleness right after create: %q; want current", in.Staleness)
	}
	// Memory is known but may read 0: cgroup v1 charges pages to the cgroup
	// that was current when they were allocated, before the init moved.
	if !in.Tasks.Known || in.Tasks.Value < 1 || !in.Memory.Known || !in.Disk.Known {
		t.Fatalf("usage of a fresh sandbox: %+v; want its init (a task per thread), memory and disk (under a quota) known", in)
	}
	// The project moves on; btrfs tells at its next commit.
	if err := os.WriteFile(filepath.Join(e.project, "index.html"), []byte("<h1>v2</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("btrfs", "filesystem", "sync", e.project).CombinedOutput(); err != nil {
		t.Fatalf("btrfs filesystem sync: %v: %s", err, out)
	}
	if in, err = e.sup.Inspect(ctx, sb.ID, supervisor.LiveAll); err != nil || in.Staleness != supervisor.Stale {
		t.Fatalf("staleness after the project changed: %q, %v; want stale", in.Staleness, err)
	}
}
