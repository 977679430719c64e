// Package cowfstest is the conformance suite of cowfs backends: the same
// behaviour, checked the way a user would check it (by the files), on every
// backend. Each backend's test runs it on a real pool in the testbed.
package cowfstest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/treetest"
)

// Pool is what a backend's test gives the suite.
type Pool struct {
	Backend cowfs.Backend
	// Project is a fresh, empty project volume in the pool.
	Project cowfs.Volume
	// Foreign is a project location outside the pool (another filesystem,
	// another pool); opening it must fail with ForeignErr.
	Foreign    string
	ForeignErr error
	// ReadOnlyByMode: the backend's read-only snapshots are not a
	// read-only mount but a tree whose top directory is mode 0555 (the
	// cowfsfake package): a write there fails with EACCES, not EROFS,
	// and root, whom modes do not stop, is not refused.
	ReadOnlyByMode bool
	// Leftovers lists what the pool holds beside the project (ZFS: its
	// datasets and snapshots); nil: nothing to look at.
	Leftovers func(t *testing.T) []string
}

// Run runs every check; newPool makes a fresh pool and project per check.
func Run(t *testing.T, newPool func(t *testing.T) Pool) {
	checks := []struct {
		name string
		fn   func(t *testing.T, p Pool)
	}{
		{"SnapshotsShowTheProjectsFiles", snapshotsShowFiles},
		{"BadNamesChangeNothing", badNames},
		{"ExistingNameIsRefused", existingName},
		{"GetAndList", getAndList},
		{"DeleteRemovesOnlyOurs", deleteOnlyOurs},
		{"ForkOutlivesItsSource", forkOutlivesSource},
		{"RollbackRestoresTheCheckpoint", rollback},
		{"RollbackProjectRestoresItsSnapshot", rollbackProject},
		{"ChangesListWhatChanged", changes},
		{"ReadsAreNoChange", readsAreNoChange},
		{"ChangedSince", changedSince},
		{"SendAndReceive", sendReceive},
		{"CorruptStreamLeavesNothing", corruptStream},
		{"QuotaStopsWrites", quota},
		{"GroupQuotaBoundsVolumesTogether", groupQuota},
		{"CloneAcrossVolumesAsTheCapabilitySays", cloneAcross},
		{"ForeignLocationIsRefused", foreign},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newPool(t)) })
	}
}

var ctx = context.Background()

// ok returns a checker that fails t on an error and passes the value on:
// ok[cowfs.Volume](t)(b.Get(ctx, name)).
func ok[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// fill writes a small project: files, a nested directory, a symlink.
func fill(t *testing.T, dir string) {
	t.Helper()
	write(t, filepath.Join(dir, "README"), "a project\n", 0o644)
	write(t, filepath.Join(dir, "src", "main.go"), "package main\n", 0o644)
	write(t, filepath.Join(dir, "src", "lib", "util.go"), "package lib\n", 0o600)
	write(t, filepath.Join(dir, "bin", "run"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "data", "old.txt"), "old\n", 0o644)
	if err := os.Symlink("bin/run", filepath.Join(dir, "run")); err != nil {
		t.Fatal(err)
	}
}

func sameTree(t *testing.T, what, a, b string) {
	t.Helper()
	ta, tb := treetest.Describe(t, a), treetest.Describe(t, b)
	if !reflect.DeepEqual(ta, tb) {
		t.Fatalf("%s: trees differ\n%s: %v\n%s: %v", what, a, ta, b, tb)
	}
	if len(ta) == 0 {
		t.Fatalf("%s: %s is empty", what, a)
	}
}

func names(vols []cowfs.Volume) []string {
	var out []string
	for _, v := range vols {
		out = append(out, v.Name+":"+string(v.Kind))
	}
	return out
}

func snapshotsShowFiles(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "base", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "sb", false))
	sameTree(t, "read-only snapshot", p.Project.Path, base.Path)
	sameTree(t, "writable snapshot", p.Project.Path, sb.Path)
	if !base.ReadOnly() || sb.ReadOnly() || !base.Ours || !sb.Ours {
		t.Fatalf("kinds: base %+v, sandbox %+v", base, sb)
	}

	write(t, filepath.Join(sb.Path, "README"), "changed in the sandbox\n", 0o644)
	if got, _ := os.ReadFile(filepath.Join(p.Project.Path, "README")); string(got) != "a project\n" {
		t.Fatalf("project README is %q after a write in the sandbox", got)
	}
	if got, _ := os.ReadFile(filepath.Join(base.Path, "README")); string(got) != "a project\n" {
		t.Fatalf("base README is %q after a write in the sandbox", got)
	}
	err := os.WriteFile(filepath.Join(base.Path, "new"), []byte("x"), 0o644)
	switch {
	case !p.ReadOnlyByMode:
		if !errors.Is(err, syscall.EROFS) {
			t.Fatalf("writing into the read-only snapshot: %v; want EROFS", err)
		}
	case os.Geteuid() != 0:
		if !errors.Is(err, syscall.EACCES) {
			t.Fatalf("writing into the read-only snapshot, whose top directory is mode 0555: %v; want EACCES", err)
		}
	}
}

func badNames(t *testing.T, p Pool) {
	before := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx)))
	for _, name := range []string{"", "../escape", "a/b", "a\x00b", ".hidden", "x@y", "sp ace", strings.Repeat("n", cowfs.MaxNameLen+1), "..", "-flag"} {
		if _, err := p.Backend.Snapshot(ctx, p.Project, name, true); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("snapshot named %q: %v; want ErrInvalidName", name, err)
		} else if !strings.Contains(err.Error(), "name") {
			t.Errorf("snapshot named %q: error %q does not say what is wrong", name, err)
		}
		if _, err := p.Backend.Create(ctx, name); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("create named %q: %v; want ErrInvalidName", name, err)
		}
		if _, err := p.Backend.Get(ctx, name); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("get named %q: %v; want ErrInvalidName", name, err)
		}
	}
	if after := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx))); !reflect.DeepEqual(before, after) {
		t.Fatalf("volumes changed after bad names: %v -> %v", before, after)
	}
}

func existingName(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	first := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "taken", true))
	write(t, filepath.Join(p.Project.Path, "README"), "later\n", 0o644)
	_, err := p.Backend.Snapshot(ctx, p.Project, "taken", true)
	if !errors.Is(err, cowfs.ErrExists) || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("second snapshot named taken: %v; want ErrExists naming it", err)
	}
	if _, err := p.Backend.Create(ctx, "taken"); !errors.Is(err, cowfs.ErrExists) {
		t.Fatalf("create over a snapshot: %v; want ErrExists", err)
	}
	if got, _ := os.ReadFile(filepath.Join(first.Path, "README")); string(got) != "a project\n" {
		t.Fatalf("the existing snapshot changed: README is %q", got)
	}
}

func getAndList(t *testing.T, p Pool) {
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	ok[cowfs.Volume](t)(p.Backend.Create(ctx, "empty"))
	got := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx)))
	want := []string{"b1:readonly", "empty:writable", "s1:writable"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("List = %v; want %v", got, want)
	}
	v := ok[cowfs.Volume](t)(p.Backend.Get(ctx, "s1"))
	if v.Kind != cowfs.KindWritable || !v.Ours || v.Path == "" || v.Created.IsZero() {
		t.Fatalf("Get(s1) = %+v", v)
	}
	if _, err := p.Backend.Get(ctx, "nope"); !errors.Is(err, cowfs.ErrNotFound) {
		t.Fatalf("Get(nope): %v; want ErrNotFound", err)
	}
}

func deleteOnlyOurs(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	if err := p.Backend.Delete(ctx, p.Project); !errors.Is(err, cowfs.ErrNotOurs) {
		t.Fatalf("deleting the project: %v; want ErrNotOurs", err)
	}
	if _, err := os.Stat(filepath.Join(p.Project.Path, "README")); err != nil {
		t.Fatalf("project after a refused delete: %v", err)
	}
	if err := p.Backend.Delete(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Backend.Get(ctx, "s1"); !errors.Is(err, cowfs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v; want ErrNotFound", err)
	}
	if _, err := os.Stat(sb.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox files after Delete: %v", err)
	}
	if err := p.Backend.Delete(ctx, sb); !errors.Is(err, cowfs.ErrNotFound) {
		t.Fatalf("second Delete: %v; want ErrNotFound", err)
	}
	if err := p.Backend.Delete(ctx, base); err != nil {
		t.Fatal(err)
	}
	if vols := ok[[]cowfs.Volume](t)(p.Backend.List(ctx)); len(vols) != 0 {
		t.Fatalf("volumes left: %v", names(vols))
	}
	sameTree(t, "project after deletes", p.Project.Path, p.Project.Path)
}

func rollback(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	write(t, filepath.Join(sb.Path, "step1"), "one\n", 0o644)
	ck := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "ck1", true))
	write(t, filepath.Join(sb.Path, "README"), "broken\n", 0o644)
	if err := os.Remove(filepath.Join(sb.Path, "src", "main.go")); err != nil {
		t.Fatal(err)
	}
	if err := p.Backend.Rollback(ctx, sb, ck); err != nil {
		t.Fatal(err)
	}
	after := ok[cowfs.Volume](t)(p.Backend.Get(ctx, "s1"))
	if after.Path != sb.Path {
		t.Fatalf("rollback moved the sandbox: %s -> %s", sb.Path, after.Path)
	}
	sameTree(t, "sandbox after rollback", ck.Path, sb.Path)
	if got, _ := os.ReadFile(filepath.Join(sb.Path, "step1")); string(got) != "one\n" {
		t.Fatalf("step1 after rollback: %q", got)
	}
	if err := p.Backend.Rollback(ctx, ck, sb); !errors.Is(err, cowfs.ErrReadOnly) {
		t.Fatalf("rolling back a read-only snapshot: %v; want ErrReadOnly", err)
	}
}

func rollbackProject(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	rp := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "rp1", true))
	write(t, filepath.Join(p.Project.Path, "README"), "half promoted\n", 0o644)
	write(t, filepath.Join(p.Project.Path, "new"), "new\n", 0o644)
	if err := p.Backend.RollbackProject(ctx, p.Project, rp); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "project after its rollback", rp.Path, p.Project.Path)
	again := ok[cowfs.Volume](t)(p.Backend.Project(ctx, p.Project.Name))
	if again.Path != p.Project.Path {
		t.Fatalf("the rollback moved the project: %s -> %s", p.Project.Path, again.Path)
	}
	// Only a project, and only to a read-only snapshot of sandboxd's.
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, rp, "s1", false))
	if err := p.Backend.RollbackProject(ctx, sb, rp); !errors.Is(err, cowfs.ErrInvalidName) {
		t.Fatalf("RollbackProject of a sandbox: %v; want ErrInvalidName", err)
	}
	if err := p.Backend.RollbackProject(ctx, p.Project, sb); !errors.Is(err, cowfs.ErrInvalidName) {
		t.Fatalf("RollbackProject to a writable volume: %v; want ErrInvalidName", err)
	}
	sameTree(t, "project after refused rollbacks", rp.Path, p.Project.Path)
}

func changes(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	write(t, filepath.Join(sb.Path, "new.txt"), "new\n", 0o644)
	write(t, filepath.Join(sb.Path, "src", "main.go"), "package main\n\nfunc main() {}\n", 0o644)
	check(t, os.Remove(filepath.Join(sb.Path, "data", "old.txt")))
	check(t, os.Rename(filepath.Join(sb.Path, "src", "lib", "util.go"), filepath.Join(sb.Path, "src", "lib", "helpers.go")))
	check(t, os.Chmod(filepath.Join(sb.Path, "bin", "run"), 0o700))
	check(t, os.Mkdir(filepath.Join(sb.Path, "docs"), 0o755))
	ck := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "ck1", true))

	got := ok[[]cowfs.Change](t)(p.Backend.Changes(ctx, base, ck))
	want := []cowfs.Change{
		{Path: "bin/run", Kind: cowfs.Metadata, Type: cowfs.TypeFile},
		{Path: "data/old.txt", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
		{Path: "docs", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "new.txt", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "src/lib/util.go", NewPath: "src/lib/helpers.go", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "src/main.go", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes:\n got %v\nwant %v", got, want)
	}
	if none := ok[[]cowfs.Change](t)(p.Backend.Changes(ctx, ck, ck)); len(none) != 0 {
		t.Fatalf("Changes of a snapshot against itself: %v", none)
	}
}

// readsAreNoChange: reading a sandbox's files and listing its directories
// from the host moves access times only, which no change list shows.
func readsAreNoChange(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	// strictatime-like: make every file's access time older than its
	// modification time, so that relatime updates it on the next read.
	err := filepath.WalkDir(sb.Path, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		old := time.Now().Add(-48 * time.Hour)
		info, err := os.Lstat(path)
		if err != nil || info.Mode()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(path, old, info.ModTime())
	})
	check(t, err)
	before := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "r0", true))
	err = filepath.WalkDir(sb.Path, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			_, err = os.ReadFile(path)
		}
		return err
	})
	check(t, err)
	syncFS(t, sb.Path)
	after := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "r1", true))
	if changes := ok[[]cowfs.Change](t)(p.Backend.Changes(ctx, before, after)); len(changes) != 0 {
		t.Fatalf("reading every file changed: %+v", changes)
	}
}

func changedSince(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	snap := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	changed, err := p.Backend.ChangedSince(ctx, p.Project, snap)
	if !p.Backend.Info().Capabilities.Generation {
		if !errors.Is(err, cowfs.ErrUnsupported) {
			t.Fatalf("ChangedSince without the Generation capability: %v; want ErrUnsupported", err)
		}
		return
	}
	if err != nil || changed {
		t.Fatalf("ChangedSince right after the snapshot: %v, %v; want false", changed, err)
	}
	write(t, filepath.Join(p.Project.Path, "README"), "moved on\n", 0o644)
	syncFS(t, p.Project.Path)
	if changed := ok[bool](t)(p.Backend.ChangedSince(ctx, p.Project, snap)); !changed {
		t.Fatal("ChangedSince after a write: false; want true")
	}
}

func syncFS(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

func sendReceive(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	var full bytes.Buffer
	if err := p.Backend.Send(ctx, &full, nil, base); err != nil {
		t.Fatal(err)
	}
	fullLen := full.Len()
	got := ok[cowfs.Volume](t)(p.Backend.Receive(ctx, &full, "copy"))
	if !got.ReadOnly() || got.Name != "copy" {
		t.Fatalf("received %+v", got)
	}
	sameTree(t, "received copy", base.Path, got.Path)

	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	write(t, filepath.Join(sb.Path, "added"), "x\n", 0o644)
	ck := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "ck1", true))
	var incr bytes.Buffer
	if err := p.Backend.Send(ctx, &incr, &base, ck); err != nil {
		t.Fatal(err)
	}
	if incr.Len() == 0 || incr.Len() >= fullLen {
		t.Fatalf("incremental stream is %d bytes (full %d): want smaller and non-empty", incr.Len(), fullLen)
	}
	if err := p.Backend.Delete(ctx, got); err != nil {
		t.Fatalf("deleting a received volume: %v", err)
	}
	if err := p.Backend.Send(ctx, &incr, nil, sb); !errors.Is(err, cowfs.ErrReadOnly) {
		t.Fatalf("sending a writable volume: %v; want ErrReadOnly", err)
	}
}

func corruptStream(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	var full bytes.Buffer
	if err := p.Backend.Send(ctx, &full, nil, base); err != nil {
		t.Fatal(err)
	}
	before := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx)))
	stream := full.Bytes()
	inputs := map[string][]byte{
		"empty":     nil,
		"garbage":   bytes.Repeat([]byte("not a stream "), 100),
		"truncated": stream[:len(stream)/2],
	}
	flipped := bytes.Clone(stream)
	flipped[len(flipped)/2] ^= 0xff
	inputs["flipped byte"] = flipped
	for what, in := range inputs {
		_, err := p.Backend.Receive(ctx, bytes.NewReader(in), "bad")
		if !errors.Is(err, cowfs.ErrCorruptStream) {
			t.Errorf("receiving a %s stream: %v; want ErrCorruptStream", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), "bad") {
			t.Errorf("receiving a %s stream: %q does not name the volume", what, err)
		}
		if after := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx))); !reflect.DeepEqual(before, after) {
			t.Fatalf("receiving a %s stream left volumes: %v -> %v", what, before, after)
		}
	}
}

func quota(t *testing.T, p Pool) {
	if !p.Backend.Info().Capabilities.Quota {
		t.Skip("the backend enforces no quota (Capabilities.Quota)")
	}
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	const limit = 5 << 20
	if err := p.Backend.SetQuota(ctx, sb, limit); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(sb.Path, "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
	var written int
	var werr error
	for written < 20<<20 {
		var n int
		if n, werr = f.Write(chunk); werr != nil {
			break
		}
		written += n
		if werr = f.Sync(); werr != nil {
			break
		}
	}
	if werr == nil {
		werr = f.Close()
	} else {
		f.Close()
	}
	if !errors.Is(werr, syscall.EDQUOT) && !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 20 MiB under a 5 MiB quota: wrote %d bytes, error %v; want EDQUOT", written, werr)
	}
	if written > 8<<20 {
		t.Fatalf("wrote %d bytes under a 5 MiB quota", written)
	}
	u := ok[cowfs.Usage](t)(p.Backend.Usage(ctx, sb))
	if u.Quota != limit || u.Exclusive == 0 || u.Exclusive > 8<<20 {
		t.Fatalf("Usage = %+v; want quota %d and exclusive use near it", u, limit)
	}
	if err := p.Backend.SetQuota(ctx, sb, 0); err != nil {
		t.Fatal(err)
	}
	if u := ok[cowfs.Usage](t)(p.Backend.Usage(ctx, sb)); u.Quota != 0 {
		t.Fatalf("quota after removing it: %d", u.Quota)
	}
	if err := p.Backend.SetQuota(ctx, p.Project, limit); !errors.Is(err, cowfs.ErrNotOurs) {
		t.Fatalf("a quota on the project: %v; want ErrNotOurs", err)
	}
}

func foreign(t *testing.T, p Pool) {
	_, err := p.Backend.Project(ctx, p.Foreign)
	if !errors.Is(err, p.ForeignErr) || !strings.Contains(err.Error(), p.Foreign) {
		t.Fatalf("opening %s as a project: %v; want %v naming it", p.Foreign, err, p.ForeignErr)
	}
	if _, err := p.Backend.Project(ctx, p.Project.Name+"-missing"); !errors.Is(err, cowfs.ErrNotFound) {
		t.Fatalf("opening a missing project: %v; want ErrNotFound", err)
	}
}

// DeleteAll deletes every volume of sandboxd's in the backend, in whatever
// order their dependencies allow (ZFS: clones before their origins).
func DeleteAll(ctx context.Context, b cowfs.Backend) error {
	for {
		vols, err := b.List(ctx)
		if err != nil || len(vols) == 0 {
			return err
		}
		var errs []error
		for _, v := range vols {
			if err := b.Delete(ctx, v); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == len(vols) {
			return errors.Join(errs...)
		}
	}
}

// FullPool checks, on a small pool, that a receive that runs out of space
// fails with ErrNoSpace naming the volume, leaves no volume behind, and
// works again once space is freed. takeSpace takes the pool's free space
// and returns how to give it back; nil fills it by writing a file into the
// project until ENOSPC.
func FullPool(t *testing.T, p Pool, takeSpace func(t *testing.T) (free func())) {
	fill(t, p.Project.Path)
	write(t, filepath.Join(p.Project.Path, "payload"), strings.Repeat("sandboxd ", 2<<20), 0o644) // 18 MiB
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	var stream bytes.Buffer
	if err := p.Backend.Send(ctx, &stream, nil, base); err != nil {
		t.Fatal(err)
	}
	before := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx)))
	if takeSpace == nil {
		takeSpace = func(t *testing.T) func() { return fillByWriting(t, p.Project.Path) }
	}
	free := takeSpace(t)

	_, err := p.Backend.Receive(ctx, bytes.NewReader(stream.Bytes()), "copy")
	if !errors.Is(err, cowfs.ErrNoSpace) || !strings.Contains(err.Error(), "copy") {
		t.Fatalf("receiving into a full pool: %v; want ErrNoSpace naming the volume", err)
	}
	if after := names(ok[[]cowfs.Volume](t)(p.Backend.List(ctx))); !reflect.DeepEqual(before, after) {
		t.Fatalf("a failed receive left volumes: %v -> %v", before, after)
	}
	// The fault ends: the same receive works.
	free()
	got := ok[cowfs.Volume](t)(p.Backend.Receive(ctx, bytes.NewReader(stream.Bytes()), "copy"))
	sameTree(t, "received after space was freed", base.Path, got.Path)
}

// fillByWriting writes a file into dir until the filesystem is full, and
// returns how to remove it.
func fillByWriting(t *testing.T, dir string) func() {
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("full pool "), 100<<10) // ~1 MiB
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
				t.Fatalf("filling the pool: %v", err)
			}
			break
		}
	}
	_ = f.Sync()
	f.Close()
	syncFS(t, dir)
	return func() {
		check(t, os.Remove(filler))
		syncFS(t, dir)
	}
}
