package fork_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// zfsList is what `zfs list` shows of dataset ds and below: its
// datasets and snapshots, ds itself left out.
func zfsList(t *testing.T, ds string) []string {
	t.Helper()
	out, err := exec.Command("zfs", "list", "-H", "-o", "name", "-t", "filesystem,snapshot", "-r", ds).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs list -r %s: %v: %s", ds, err, out)
	}
	return slices.DeleteFunc(strings.Fields(string(out)), func(n string) bool { return n == ds })
}

// A sandbox on the testbed's ZFS pool (zfs-fuse) forked 2 ways: each
// fork has what it wrote and changes apart; the source is destroyed and
// the forks live on with their files; once they are destroyed too, no
// dataset or snapshot of theirs is left, in sandboxd's root or on the
// project.
func TestForkOnZFS(t *testing.T) {
	tb := testbed.Require(t)
	root := fmt.Sprintf("%s/fork-zfs-%d", tb.ZFS.Pool, os.Getpid())
	proj := fmt.Sprintf("%s/fork-web-%d", tb.ZFS.Pool, os.Getpid())
	testbed.MustRun(t, "zfs", "create", proj)
	t.Cleanup(func() { testbed.DestroyDatasets(t, root, proj) })
	fs, err := zfs.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	e := supervisortest.New(t, "fkz", nil)
	e.Config.Backend, e.FS = fs, fs
	e.Config.Projects = map[string]string{"data": proj}
	e.Remake(t)
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

	src, err := e.Sup.Create(ctx, supervisor.CreateOptions{Project: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.Commands, src.ID, 0, "echo built > built.txt"); res.Code != 0 {
		t.Fatalf("writing in the source: %v %q", res, out)
	}
	res, err := e.Forks.Fork(ctx, src.ID, fork.Options{Count: 2})
	if err != nil {
		t.Fatalf("forking a sandbox on ZFS: %v", err)
	}
	if len(res.Sandboxes) != 2 {
		t.Fatalf("forks: %+v; want 2", res.Sandboxes)
	}
	for i, sb := range res.Sandboxes {
		script := fmt.Sprintf("cat built.txt && echo fork%d > mine.txt", i)
		if out, r := supervisortest.RunAs(t, e.Commands, sb.Record.ID, 0, script); r.Code != 0 || out != "built\n" {
			t.Fatalf("fork %d: %v %q; want the source's built.txt", i, r, out)
		}
	}
	if out, r := supervisortest.RunAs(t, e.Commands, src.ID, 0, "echo source > built.txt; ls"); r.Code != 0 || strings.Contains(out, "mine.txt") {
		t.Errorf("the source after its forks wrote: %v %q; want no mine.txt", r, out)
	}
	if err := e.Sup.Destroy(ctx, src.ID); err != nil {
		t.Fatalf("destroying the source of forks on ZFS: %v", err)
	}
	for i, sb := range res.Sandboxes {
		want := fmt.Sprintf("built\nfork%d\n", i)
		if out, r := supervisortest.RunAs(t, e.Commands, sb.Record.ID, 0, "cat built.txt mine.txt"); r.Code != 0 || out != want {
			t.Errorf("fork %d after its source was destroyed: %v %q; want %q", i, r, out, want)
		}
	}
	for _, sb := range res.Sandboxes {
		if err := e.Sup.Destroy(ctx, sb.Record.ID); err != nil {
			t.Fatalf("destroying fork %s: %v", sb.Record.ID, err)
		}
	}
	if left := append(zfsList(t, root), zfsList(t, proj)...); len(left) != 0 {
		t.Errorf("left after the source and its forks were destroyed: %v", left)
	}
}
