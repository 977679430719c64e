package supervisor_test

import (
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestSandboxNamesAreUnique(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Owner: 1000, Name: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Name != "agent-1" {
		t.Fatalf("created %+v; want it named agent-1", sb)
	}
	if got, err := e.sup.Get(ctx, sb.ID); err != nil || got.Name != "agent-1" {
		t.Fatalf("Get(%s) = %+v, %v; want it named agent-1", sb.ID, got, err)
	}
	before := supervisortest.Volumes(t, e.fs)

	// Another owner, the same name: refused, and nothing made.
	_, err = e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Owner: 1001, Name: "agent-1"})
	if !errors.Is(err, supervisor.ErrExists) || !strings.Contains(err.Error(), `a sandbox named "agent-1" exists; pick another name or destroy it`) {
		t.Fatalf("a second sandbox named agent-1: %v; want ErrExists saying so", err)
	}
	if list, _ := e.sup.List(ctx); len(list) != 1 {
		t.Fatalf("records after the refused create: %+v; want the first alone", list)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != len(before) {
		t.Fatalf("volumes after the refused create: %v; want %v", vols, before)
	}
	// Another name, and no name, are fine; names free up with their sandbox.
	if _, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Name: "agent-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"}); err != nil {
		t.Fatal(err)
	}
	if err := e.sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Name: "agent-1"}); err != nil {
		t.Fatalf("agent-1 again once the first is destroyed: %v", err)
	}
}

func TestBadSandboxNamesAreRefused(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"a b", ".hidden", "-x", "a/b", "../etc", "x@y", strings.Repeat("n", 101), "0123456789ab", "deadbeef0000"} {
		_, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Name: name})
		if !errors.Is(err, supervisor.ErrInvalid) {
			t.Errorf("a sandbox named %q: %v; want ErrInvalid", name, err)
		}
	}
	if list, _ := e.sup.List(ctx); len(list) != 0 {
		t.Fatalf("records after the refused creates: %+v", list)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 0 {
		t.Fatalf("volumes after the refused creates: %v", vols)
	}
	// What is close to an id but is not one is a name.
	for _, name := range []string{"0123456789AB", "0123456789abc", "0123456789a", "g123456789ab", "web.1", "A_b-c"} {
		if err := supervisor.ValidateSandboxName(name); err != nil {
			t.Errorf("ValidateSandboxName(%q): %v; want it taken", name, err)
		}
	}
}

func TestConcurrentCreatesOfOneNameMakeOneSandbox(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var made []string
	taken := 0
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Owner: uint32(3000 + i), Name: "the-one"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made = append(made, sb.ID)
			case errors.Is(err, supervisor.ErrExists):
				taken++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(made) != 1 || taken != 5 {
		t.Fatalf("6 concurrent creates named the-one: %d made (%v), %d refused; want 1 and 5", len(made), made, taken)
	}
	list, err := e.sup.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != made[0] || list[0].Name != "the-one" {
		t.Fatalf("sandboxes: %+v, %v; want %s alone", list, err, made[0])
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 3 {
		t.Fatalf("volumes: %v; want the one sandbox's 3", vols)
	}
}

// A removal of a project and creates of it, at once: either a create
// comes first (and the removal is refused while its sandbox exists) or the
// removal does (and the create finds no project); never a sandbox of a
// removed project. The audit log has each change.
func TestProjectRemovalsAndCreatesDoNotCross(t *testing.T) {
	tb := testbed.Require(t)
	e := newEnv(t)
	sup, logPath := withPolicy(t, e, supervisor.Policy{})
	path := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("sup-race-%d", os.Getpid()))
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { testbed.MustRun(t, "btrfs", "subvolume", "delete", path) })

	orders := map[string]int{}
	for round := range 6 {
		if err := sup.Projects().Add(supervisor.WithCaller(ctx, 0), "race", path, supervisor.ProjectAccess{}); err != nil {
			t.Fatalf("round %d: AddProject: %v", round, err)
		}
		var wg sync.WaitGroup
		var createErr, removeErr error
		var sb supervisor.Sandbox
		wg.Add(2)
		go func() { defer wg.Done(); sb, createErr = sup.Create(ctx, supervisor.CreateOptions{Project: "race"}) }()
		go func() {
			defer wg.Done()
			// Later each round, so that both orders happen.
			time.Sleep(time.Duration(round) * time.Millisecond)
			removeErr = sup.Projects().Remove(supervisor.WithCaller(ctx, 0), "race")
		}()
		wg.Wait()
		switch {
		case createErr == nil && errors.Is(removeErr, supervisor.ErrProjectInUse):
			if err := sup.Destroy(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if err := sup.Projects().Remove(supervisor.WithCaller(ctx, 0), "race"); err != nil {
				t.Fatalf("round %d: RemoveProject once its sandbox is gone: %v", round, err)
			}
			orders["create first"]++
		case removeErr == nil && errors.Is(createErr, supervisor.ErrUnknownProject):
			orders["removal first"]++
		default:
			t.Fatalf("round %d: create %v, remove %v; want one of them refused for the other", round, createErr, removeErr)
		}
		if list, _ := sup.List(ctx); len(list) != 0 {
			t.Fatalf("round %d: sandboxes left: %+v", round, list)
		}
	}
	t.Logf("orders seen: %v", orders)
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"caller_uid":0,"action":"project-add","project":"race","result":"ok"`,
		`"caller_uid":0,"action":"project-remove","project":"race","result":"ok"`,
	} {
		if !strings.Contains(string(data), want) {
			t.Fatalf("the audit log has no %s:\n%s", want, data)
		}
	}
	if !strings.Contains(string(data), `"location":"`+path+`"`) {
		t.Fatalf("the audit log does not name the project's location %s:\n%s", path, data)
	}
}

// On ZFS a project is a dataset of the pool; anything else is refused,
// saying so.
func TestAProjectAddedOnZFSIsADataset(t *testing.T) {
	tb := testbed.Require(t)
	root := fmt.Sprintf("%s/sup-zproj-%d", tb.ZFS.Pool, os.Getpid())
	fs, err := zfs.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("zfs", "destroy", "-r", root).Run() })
	e := newEnv(t)
	cfg := e.cfg
	cfg.Backend = fs
	cfg.Projects = nil
	sup := supervisor.New(cfg)
	if err := sup.Projects().Add(ctx, "data", tb.ZFS.Project, supervisor.ProjectAccess{}); err != nil {
		t.Fatalf("AddProject of dataset %s: %v", tb.ZFS.Project, err)
	}
	for _, location := range []string{tb.ZFS.Pool + "/no-such-dataset", e.project, "otherpool/data", root} {
		err := sup.Projects().Add(ctx, "bad", location, supervisor.ProjectAccess{})
		if !errors.Is(err, supervisor.ErrInvalidProject) || !strings.Contains(err.Error(), location) ||
			!strings.Contains(err.Error(), "a ZFS dataset of pool "+tb.ZFS.Pool) || !strings.Contains(err.Error(), "zfs create") {
			t.Errorf("AddProject at %s on ZFS: %v; want ErrInvalidProject naming it and saying what a project is", location, err)
		}
	}
	if got := sup.Projects().List(); len(got) != 1 || !reflect.DeepEqual(got[0], supervisor.Project{Name: "data", Location: tb.ZFS.Project, Origin: supervisor.OriginAdded}) {
		t.Fatalf("projects = %+v; want data alone", got)
	}
	if err := sup.Projects().Remove(ctx, "data"); err != nil {
		t.Fatal(err)
	}
}
