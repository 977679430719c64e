package adopt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The room's logic without root, against a fake Host (fakehost_test.go)
// and directories of the test's own user: `-run Unit` picks these.

// unitRoom is the room over a fake Host whose pool is at dir/pool.
func unitRoom(t *testing.T, dir string) (*Adoptions, *fakeHost) {
	t.Helper()
	h := newFakeHost(t, fakePool{root: filepath.Join(dir, "pool")}, nil)
	return New(h, Config{}), h
}

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnitAdoptableTakesOnlyAPlainDirectoryOfTheCallersOwn(t *testing.T) {
	base := t.TempDir()
	s, h := unitRoom(t, filepath.Join(base, "holds-pool"))
	h.runtime = filepath.Join(base, "holds-run", "run")
	uid := uint32(os.Geteuid())
	other := uid + 1
	own := filepath.Join(base, "own")
	mkdirs(t, own, filepath.Join(base, "a%b"), h.runtime, filepath.Join(base, "holds-pool", "pool"), filepath.Join(base, "adopted", "app", "sub"))
	if err := os.Symlink(own, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.LoadProject(state.Project{Name: "app", Location: filepath.Join(base, "pool-adopted", "app"),
		Adoption: &state.Adoption{Path: filepath.Join(base, "adopted", "app"), How: state.AdoptMount, Phase: state.AdoptDone}})

	for _, c := range []struct {
		path   string
		caller *uint32
		want   string
	}{
		{"rel/dir", &uid, "is not an absolute, clean path"},
		{base + "/own/../own", &uid, "is not an absolute, clean path"},
		{"/", &uid, "/ cannot be a project"},
		{filepath.Join(base, "a%b"), &uid, "would be a specifier in its mount unit"},
		{filepath.Join(base, "link"), &uid, "is a symlink"},
		{filepath.Join(base, "file"), &uid, "is not a directory"},
		{filepath.Join(base, "missing"), &uid, "no such file or directory"},
		{filepath.Join(base, "adopted"), &uid, `project "app"'s ` + filepath.Join(base, "adopted", "app") + " are one inside the other"},
		{filepath.Join(base, "adopted", "app", "sub"), &uid, "are one inside the other"},
		{filepath.Join(base, "holds-run"), &uid, "holds sandboxd's own " + h.runtime},
		{filepath.Join(base, "holds-pool"), &uid, "holds sandboxd's own " + filepath.Join(base, "holds-pool", "pool")},
		{own, &other, "not by you"},
	} {
		owned, err := s.adoptable(c.path, c.caller)
		if !errors.Is(err, supervisor.ErrInvalidProject) || !strings.Contains(err.Error(), c.want) || owned {
			t.Errorf("adoptable(%q, uid %d) = %v, %v; want %q, an invalid project", c.path, *c.caller, owned, err, c.want)
		}
	}
	owned, err := s.adoptable(own, &uid)
	if err != nil || !owned {
		t.Fatalf("adoptable(%q), the caller's own = %v, %v; want owned (by descriptor), nil", own, owned, err)
	}
}

func TestUnitAdoptionsLeftCountsEachMembersOwn(t *testing.T) {
	s, h := unitRoom(t, t.TempDir())
	owner := func(uid uint32) *uint32 { return &uid }
	for _, p := range []state.Project{
		{Name: "a", Location: "/p/a", Adoption: &state.Adoption{Path: "/home/m/a", How: state.AdoptOwned, Phase: state.AdoptDone, Owner: owner(1001)}},
		{Name: "b", Location: "/p/b", Adoption: &state.Adoption{Path: "/home/m/b", How: state.AdoptOwned, Phase: state.AdoptCopying, Owner: owner(1001)}},
		{Name: "c", Location: "/p/c", Adoption: &state.Adoption{Path: "/home/n/c", How: state.AdoptOwned, Phase: state.AdoptDone, Owner: owner(1002)}},
		{Name: "d", Location: "/p/d"},
		{Name: "e", Location: "/srv/e", Adoption: &state.Adoption{Path: "/srv/e", How: state.AdoptSwap, Phase: state.AdoptDone}},
	} {
		if err := h.Store().AddProject(p); err != nil {
			t.Fatal(err)
		}
	}
	h.policy.MaxAdoptionsPerOwner = 2
	// Done and under way both count; another's, root's and admins' not.
	err := s.adoptionsLeft(owner(1001))
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "uid 1001 has adopted 2 directories") {
		t.Errorf("a member at the limit: %v; want the limit reached, 2 counted", err)
	}
	for _, c := range []*uint32{owner(1002), owner(1003), nil} {
		if err := s.adoptionsLeft(c); err != nil {
			t.Errorf("adoptionsLeft(%v) = %v; want nil", c, err)
		}
	}
	h.policy.MaxAdoptionsPerOwner = 0
	if err := s.adoptionsLeft(owner(1001)); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

func TestUnitEmptyBeneathRemovesOnlyTheAdoptersOwn(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "dir"), filepath.Join(base, "outside")
	mkdirs(t, filepath.Join(dir, "sub", "deep"), outside)
	for _, f := range []string{filepath.Join(dir, "f"), filepath.Join(dir, "sub", "deep", "g"), filepath.Join(outside, "keep")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub", "to-outside")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))
	uid := uint32(os.Geteuid())

	// Adopted by another: every entry here is someone else's to it.
	adopter := uid + 1
	err = emptyBeneath(ctx, fd, &adopter)
	if !errors.Is(err, supervisor.ErrInvalidProject) || !strings.Contains(err.Error(), "not removed") {
		t.Fatalf("emptying for uid %d a tree of uid %d: %v; want it refused", adopter, uid, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "deep", "g")); err != nil {
		t.Fatalf("an entry not the adopter's was removed: %v", err)
	}

	if err := emptyBeneath(ctx, fd, &uid); err != nil {
		t.Fatalf("emptying the adopter's own tree: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the directory: %v", left)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a symlink's target was emptied too: %v", err)
	}
}

func TestUnitReleaseRefusesWhatIsNotTheMembersAdoption(t *testing.T) {
	s, h := unitRoom(t, t.TempDir())
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))
	adopter := uint32(1001)
	web := state.Project{Name: "web", Location: "/p/web",
		Adoption: &state.Adoption{Path: "/home/m/web", How: state.AdoptOwned, Phase: state.AdoptDone, Owner: &adopter}}
	plain := state.Project{Name: "plain", Location: "/p/plain"}
	for _, p := range []state.Project{web, plain} {
		if err := h.Store().AddProject(p); err != nil {
			t.Fatal(err)
		}
		h.LoadProject(p)
	}

	if err := s.ReleaseOwn(ctx, "web", 1002); !errors.Is(err, supervisor.ErrAccessDenied) || !strings.Contains(err.Error(), "uid 1002 did not adopt it") {
		t.Errorf("another member's release: %v; want access denied", err)
	}
	if err := s.Release(ctx, "plain"); !errors.Is(err, supervisor.ErrInvalidProject) || !strings.Contains(err.Error(), "it was not adopted") {
		t.Errorf("the release of a project added, not adopted: %v", err)
	}
	if err := s.Release(ctx, "nothing"); !errors.Is(err, supervisor.ErrUnknownProject) {
		t.Errorf("the release of no project: %v", err)
	}
	// Refused before anything changed: still a project, still done.
	if _, ok := h.Project("web"); !ok {
		t.Error("project web was forgotten by a refused release")
	}
	recs, err := h.Store().Projects()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(recs, func(r state.Project) bool { return r.Name == "web" }); i < 0 || recs[i].Adoption.Phase != state.AdoptDone {
		t.Errorf("web's record after a refused release: %+v", recs)
	}
	var released []string
	for _, a := range h.Audits() {
		if a.Entry.Action == "project-release" && a.Err != nil {
			released = append(released, a.Record.Project)
		}
	}
	if !slices.Equal(released, []string{"web", "plain", "nothing"}) {
		t.Errorf("audited releases refused: %v; want web, plain, nothing", released)
	}
}

func TestUnitAdoptRefusesBeforeTouchingAnything(t *testing.T) {
	base := t.TempDir()
	s, h := unitRoom(t, base)
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))
	dir := filepath.Join(base, "app")
	mkdirs(t, dir)
	uid := uint32(os.Geteuid())
	for _, c := range []struct {
		name string
		o    Options
		want error
		text string
	}{
		{"..bad", Options{}, supervisor.ErrInvalidProject, "not a valid name"},
		{"web", Options{Freeze: []string{"sandboxd.service"}}, supervisor.ErrInvalidProject, "cannot be frozen or stopped by sandboxd"},
		{"web", Options{Caller: &uid, Access: supervisor.ProjectAccess{Users: []string{"bob"}}}, supervisor.ErrAccessDenied, "--user and --group"},
		{"web", Options{Caller: &uid, RestartUnits: true}, supervisor.ErrAccessDenied, "--restart-units"},
		{"web", Options{Caller: &uid, Freeze: []string{"postgresql.service"}}, supervisor.ErrAccessDenied, "--freeze"},
		{"web", Options{}, supervisor.ErrInvalidProject, "the btrfs pool cannot make a project at a path"},
	} {
		err := s.Adopt(ctx, c.name, dir, c.o)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("Adopt(%q, %+v) = %v; want %v, %q", c.name, c.o, err, c.want, c.text)
		}
	}
	if recs, err := h.Store().Projects(); err != nil || len(recs) != 0 {
		t.Errorf("recorded after refusals: %+v, %v", recs, err)
	}
	if n := len(h.Audits()); n != 6 {
		t.Errorf("%d adoptions audited; want the 6 refused", n)
	}
}

func TestUnitLoadProjectsKeepsWhatIsDoneAndLeavesAHalfWayAdoptionWithoutAPool(t *testing.T) {
	_, h := unitRoom(t, t.TempDir())
	recs := []state.Project{
		{Name: "plain", Location: "/p/plain"},
		{Name: "swapped", Location: "/srv/s", Adoption: &state.Adoption{Path: "/srv/s", How: state.AdoptSwap, Phase: state.AdoptDone}},
		{Name: "half", Location: "/p-adopted/half", Adoption: &state.Adoption{Path: "/srv/h", How: state.AdoptMount, Phase: state.AdoptCopying, Temp: "/p-adopted/half"}},
	}
	hooks := h.Hooks().LoadProjects.Funcs()
	if len(hooks) != 1 {
		t.Fatalf("%d LoadProjects hooks; want the room's", len(hooks))
	}
	var names []string
	for _, p := range hooks[0](context.Background(), recs) {
		names = append(names, p.Name)
	}
	// A pool that cannot make projects finishes or undoes no adoption:
	// it is left recorded, for a daemon that can, and not loaded.
	if !slices.Equal(names, []string{"plain", "swapped"}) {
		t.Errorf("loaded %v; want plain and swapped", names)
	}
}
