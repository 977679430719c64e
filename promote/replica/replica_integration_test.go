package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/internal/treetest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// replicaSource is the sending side: a project subvolume on the testbed's
// btrfs and read-only snapshots of it, made by the btrfs backend.
type replicaSource struct {
	t       *testing.T
	b       *btrfs.Backend
	project cowfs.Volume
}

func newReplicaSource(t *testing.T) *replicaSource {
	t.Helper()
	tb := testbed.Require(t)
	ctx := context.Background()
	base := filepath.Join(tb.Btrfs.Mount, "replica-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(base, "proj")
	testbed.MustRun(t, "btrfs", "subvolume", "create", proj)
	b, err := btrfs.Open(ctx, filepath.Join(base, "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vols, err := b.List(ctx)
		if err != nil {
			t.Errorf("listing %s: %v", base, err)
		}
		for _, v := range vols {
			if err := b.Delete(ctx, v); err != nil {
				t.Errorf("cleaning up: %v", err)
			}
		}
		if out, err := exec.Command("btrfs", "subvolume", "delete", proj).CombinedOutput(); err != nil {
			t.Errorf("cleaning up: %v: %s", err, out)
		}
		if err := os.RemoveAll(base); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
	project, err := b.Project(ctx, proj)
	if err != nil {
		t.Fatal(err)
	}
	return &replicaSource{t: t, b: b, project: project}
}

// write puts files into the project: name -> content; "->target" makes a
// symlink, "" deletes; names ending in .sh are executable.
func (s *replicaSource) write(files map[string]string) {
	s.t.Helper()
	for name, content := range files {
		p := filepath.Join(s.project.Path, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			s.t.Fatal(err)
		}
		var err error
		switch {
		case content == "":
			err = os.Remove(p)
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(content[2:], p)
		default:
			mode := os.FileMode(0o644)
			if strings.HasSuffix(name, ".sh") {
				mode = 0o755
			}
			err = os.WriteFile(p, []byte(content), mode)
		}
		if err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *replicaSource) snapshot(name string) cowfs.Volume {
	s.t.Helper()
	v, err := s.b.Snapshot(context.Background(), s.project, name, true)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// send returns a Receive's send function writing the stream of to
// (incremental from from, when not nil), and counting its bytes into n.
func (s *replicaSource) send(from *cowfs.Volume, to cowfs.Volume, n *int64) func(io.Writer) error {
	return func(w io.Writer) error {
		cw := &replicaCounter{w: w}
		err := s.b.Send(context.Background(), cw, from, to)
		if n != nil {
			*n = cw.n
		}
		return err
	}
}

type replicaCounter struct {
	w io.Writer
	n int64
}

func (c *replicaCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// replicaSameTree fails unless dir holds exactly what snapshot want holds.
func replicaSameTree(t *testing.T, what, dir string, want cowfs.Volume) {
	t.Helper()
	treetest.Equal(t, fmt.Sprintf("%s: %s against %s", what, dir, want.Name), treetest.Describe(t, dir), treetest.Describe(t, want.Path))
}

// replicaStore lists the replica's store (without its lock file).
func replicaStore(t *testing.T, r *Replica) []string {
	t.Helper()
	_, _, store := r.paths()
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

func replicaTimed(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func replicaCheck(t *testing.T, r *Replica, command string, want int) string {
	t.Helper()
	var out bytes.Buffer
	start := time.Now()
	status, err := r.Check(context.Background(), command, &out)
	if err != nil {
		t.Fatalf("Check(%q): %v (output %q)", command, err, out.String())
	}
	if status != want {
		t.Fatalf("Check(%q) = %d, want %d; output:\n%s", command, status, want, out.String())
	}
	t.Logf("Check(%q) = %d in %v", command, status, time.Since(start).Round(time.Millisecond))
	return out.String()
}

// sshReplica starts an sshd and a second btrfs filesystem in the testbed,
// and returns a replica of target path mnt/app on it, over ssh.
func sshReplica(t *testing.T) (*Replica, string) {
	t.Helper()
	sshd := testbed.StartSSHD(t)
	mnt := testbed.SecondBtrfs(t)
	target, err := ParseTarget(sshd.Target(mnt + "/app"))
	if err != nil {
		t.Fatal(err)
	}
	return &Replica{Target: target, SSHOptions: sshd.Options, Backend: "btrfs"}, filepath.Join(mnt, "app")
}

func replicaRandom(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReplicaOverSSH promotes twice to a replica on another btrfs, over
// ssh to an sshd on the testbed's loopback: a full send, then an
// incremental one, each switched in, checked, and the second reverted;
// then a crash between the two renames of a switch and of a revert.
func TestReplicaOverSSH(t *testing.T) {
	ctx := context.Background()
	src := newReplicaSource(t)
	r, app := sshReplica(t)

	// 1. First promotion: a full send of s1.
	src.write(map[string]string{
		"file":          "x\n",
		"dir/a.txt":     "a\n",
		"bin/run.sh":    "#!/bin/sh\necho run\n",
		"link":          "->file",
		"data/big.bin":  replicaRandom(t, 4<<20),
		"it's odd $(x)": "quoted\n",
	})
	s1 := src.snapshot("s1")
	if has, err := r.Has(ctx, "s1"); err != nil || has {
		t.Fatalf("Has(s1) before receiving = %v, %v; want false", has, err)
	}
	var full int64
	replicaTimed(t, "Receive(s1), full", func() error { return r.Receive(ctx, "s1", src.send(nil, s1, &full)) })
	if has, err := r.Has(ctx, "s1"); err != nil || !has {
		t.Fatalf("Has(s1) after receiving = %v, %v; want true", has, err)
	}
	var prev1 string
	replicaTimed(t, "Switch(s1)", func() (err error) { prev1, err = r.Switch(ctx, "s1"); return err })
	if prev1 != "prev:s1" {
		t.Fatalf("Switch(s1) kept %q, want prev:s1", prev1)
	}
	replicaSameTree(t, "after Switch(s1)", app, s1)
	if out, err := exec.Command("btrfs", "property", "get", "-ts", app, "ro").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ro=false" {
		t.Fatalf("the target after Switch: %s %v; want a writable subvolume", out, err)
	}
	if again, err := r.Switch(ctx, "s1"); err != nil || again != prev1 {
		t.Fatalf("Switch(s1) again = %q, %v; want %q (idempotent)", again, err, prev1)
	}
	replicaSameTree(t, "after Switch(s1) twice", app, s1)

	if out := replicaCheck(t, r, "test -f file && grep x file", 0); out != "x\n" {
		t.Errorf("the passing check printed %q, want its grep's output", out)
	}
	replicaCheck(t, r, "test -f file && grep y file", 1)
	if out := replicaCheck(t, r, "echo failing >&2; exit 3", 3); out != "failing\n" {
		t.Errorf("the failing check printed %q, want its standard error", out)
	}
	cwd := replicaCheck(t, r, "pwd; ./bin/run.sh", 0)
	if !strings.HasPrefix(cwd, filepath.Dir(app)+"/.app.sandboxd/check-") || !strings.HasSuffix(cwd, "\nrun\n") {
		t.Errorf("the check ran in %q; want a snapshot in the store", cwd)
	}
	replicaCheck(t, r, "echo changed > file && rm -r dir && touch new && ls -d dir", 2)
	replicaSameTree(t, "after a check that writes", app, s1)
	if left := replicaStore(t, r); !slices.Equal(left, []string{"prev-s1", "recv-s1"}) {
		t.Errorf("the store holds %q after the checks; want only prev-s1 and recv-s1", left)
	}

	// 2. Second promotion: an incremental send from s1, which the replica has.
	src.write(map[string]string{"file": "x\ny\n", "added": "new\n", "dir/a.txt": ""})
	s2 := src.snapshot("s2")
	var inc int64
	replicaTimed(t, "Receive(s2), incremental from s1", func() error { return r.Receive(ctx, "s2", src.send(&s1, s2, &inc)) })
	t.Logf("stream of s1: %d bytes; of s2 from s1: %d bytes", full, inc)
	if inc*100 > full {
		t.Errorf("the incremental stream was %d bytes, the full one %d: not incremental", inc, full)
	}
	var prev2 string
	replicaTimed(t, "Switch(s2)", func() (err error) { prev2, err = r.Switch(ctx, "s2"); return err })
	replicaSameTree(t, "after Switch(s2)", app, s2)
	replicaCheck(t, r, "grep -qx y file && test -f added && ! test -e dir/a.txt", 0)
	replicaTimed(t, "Revert(prev:s2)", func() error { return r.Revert(ctx, prev2) })
	replicaSameTree(t, "after Revert(prev:s2)", app, s1)
	if err := r.Revert(ctx, prev2); err != nil {
		t.Fatalf("Revert(prev:s2) again: %v; want nil (idempotent)", err)
	}
	replicaSameTree(t, "after Revert(prev:s2) twice", app, s1)

	// 3. A crash between the two renames of Switch(s2): the snapshot made,
	// the target moved to prev, nothing at the target.
	_, _, store := r.paths()
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", store+"/recv-s2/s2", store+"/next-s2")
	testbed.MustRun(t, "mv", "-T", app, store+"/prev-s2")
	if _, err := r.Check(ctx, "true", nil); !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "a switch to s2") {
		t.Fatalf("Check with the target missing: %v; want ErrInterrupted naming the switch to s2", err)
	}
	if err := r.Forget(ctx, "s2"); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Forget(s2) with the target missing: %v; want ErrInterrupted", err)
	}
	if _, err := r.Switch(ctx, "s1"); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Switch(s1) with the target missing after Switch(s2) was interrupted: %v; want ErrInterrupted", err)
	}
	if err := r.Revert(ctx, "prev:s1"); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Revert(prev:s1) with the target missing after Switch(s2) was interrupted: %v; want ErrInterrupted", err)
	}
	replicaTimed(t, "Switch(s2) after a crash between its renames", func() (err error) { prev2, err = r.Switch(ctx, "s2"); return err })
	if prev2 != "prev:s2" {
		t.Fatalf("Switch(s2) after the crash kept %q", prev2)
	}
	replicaSameTree(t, "after the interrupted Switch(s2) was run again", app, s2)
	replicaSameTree(t, "prev:s2", store+"/prev-s2", s1)

	// A crash between the two renames of Revert(prev:s2).
	testbed.MustRun(t, "mv", "-T", app, store+"/gone-s2")
	replicaTimed(t, "Revert(prev:s2) after a crash between its renames", func() error { return r.Revert(ctx, prev2) })
	replicaSameTree(t, "after the interrupted Revert(prev:s2) was run again", app, s1)

	// A crash of Switch(s2) after its snapshot, before its first rename.
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", store+"/recv-s2/s2", store+"/next-s2")
	if _, err := r.Switch(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	replicaSameTree(t, "after Switch(s2) with its snapshot made already", app, s2)

	// Forget what is no longer needed: s1 stays, the parent of the next send.
	replicaTimed(t, "Forget(prev:s1, prev:s2)", func() error { return r.Forget(ctx, "prev:s1", "prev:s2") })
	if left := replicaStore(t, r); !slices.Equal(left, []string{"recv-s1", "recv-s2"}) {
		t.Errorf("the store holds %q after Forget; want recv-s1 and recv-s2", left)
	}
	if err := r.Revert(ctx, "prev:s2"); !errors.Is(err, cowfs.ErrNotFound) {
		t.Errorf("Revert of a forgotten prev: %v; want ErrNotFound", err)
	}
	if err := r.Forget(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if has, err := r.Has(ctx, "s1"); err != nil || has {
		t.Errorf("Has(s1) after Forget(s1) = %v, %v", has, err)
	}
	replicaSameTree(t, "after Forget", app, s2)
	if err := r.Receive(ctx, "s2", src.send(nil, s2, nil)); !errors.Is(err, cowfs.ErrExists) {
		t.Errorf("Receive(s2) again: %v; want ErrExists", err)
	}
}

// TestReplicaReceiveFailureLeavesNothing: a send that fails, a stream cut
// short, one that is not a stream, and an incremental one whose parent the
// replica lacks: each an error, and nothing of it left on the replica.
func TestReplicaReceiveFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	src := newReplicaSource(t)
	r, _ := sshReplica(t)
	src.write(map[string]string{"file": "x\n", "big": replicaRandom(t, 1<<20)})
	s1 := src.snapshot("s1")
	src.write(map[string]string{"file": "y\n"})
	s2 := src.snapshot("s2")
	var stream bytes.Buffer
	if err := src.b.Send(ctx, &stream, nil, s1); err != nil {
		t.Fatal(err)
	}
	errSend := errors.New("the sender broke")
	for _, tc := range []struct {
		name string
		send func(io.Writer) error
		want error  // errors.Is
		says string // in the message
	}{
		{"send fails", func(w io.Writer) error {
			_, _ = w.Write(stream.Bytes()[:stream.Len()/2])
			return errSend
		}, errSend, "sending"},
		{"stream cut short", func(w io.Writer) error {
			_, err := w.Write(stream.Bytes()[:stream.Len()/2])
			return err
		}, cowfs.ErrCorruptStream, "checking the stream"},
		{"not a stream", func(w io.Writer) error {
			_, err := io.WriteString(w, strings.Repeat("garbage\n", 1000))
			return err
		}, cowfs.ErrCorruptStream, "btrfs receive"},
		{"missing parent", src.send(&s1, s2, nil), nil, "btrfs receive of s1 failed"},
	} {
		err := r.Receive(ctx, "s1", tc.send)
		t.Logf("%s: %v", tc.name, err)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), r.Target.String()) {
			t.Errorf("%s: Receive: %v; want an error naming the target, saying %q, wrapping %v", tc.name, err, tc.says, tc.want)
		}
		if left := replicaStore(t, r); len(left) != 0 {
			t.Errorf("%s: the store holds %q after the failed receive; want nothing", tc.name, left)
		}
		if has, err := r.Has(ctx, "s1"); err != nil || has {
			t.Errorf("%s: Has(s1) = %v, %v after the failed receive", tc.name, has, err)
		}
	}
	// And then it works.
	if err := r.Receive(ctx, "s1", src.send(nil, s1, nil)); err != nil {
		t.Fatal(err)
	}
	if left := replicaStore(t, r); !slices.Equal(left, []string{"recv-s1"}) {
		t.Errorf("the store holds %q; want recv-s1", left)
	}
}

// TestReplicaLocalPath: a path target on this host (the second btrfs),
// through sh instead of ssh, works the same.
func TestReplicaLocalPath(t *testing.T) {
	ctx := context.Background()
	src := newReplicaSource(t)
	mnt := testbed.SecondBtrfs(t)
	app := filepath.Join(mnt, "staging", "app")
	if err := os.Mkdir(filepath.Dir(app), 0o755); err != nil {
		t.Fatal(err)
	}
	target, err := ParseTarget(app)
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{Target: target}
	src.write(map[string]string{"file": "x\n", "sub/dir/f": "f\n"})
	s1 := src.snapshot("s1")
	replicaTimed(t, "Receive(s1), local", func() error { return r.Receive(ctx, "s1", src.send(nil, s1, nil)) })
	var prev string
	replicaTimed(t, "Switch(s1), local", func() (err error) { prev, err = r.Switch(ctx, "s1"); return err })
	replicaSameTree(t, "after Switch(s1)", app, s1)
	replicaCheck(t, r, "test -f file && grep x file", 0)
	replicaCheck(t, r, "rm file; exit 4", 4)
	replicaSameTree(t, "after the checks", app, s1)
	src.write(map[string]string{"file": "z\n"})
	s2 := src.snapshot("s2")
	if err := r.Receive(ctx, "s2", src.send(&s1, s2, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Switch(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	replicaSameTree(t, "after Switch(s2)", app, s2)
	if err := r.Revert(ctx, "prev:s2"); err != nil {
		t.Fatal(err)
	}
	replicaSameTree(t, "after Revert(prev:s2)", app, s1)
	if err := r.Revert(ctx, prev); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(app); err != nil || len(entries) != 0 {
		t.Fatalf("after reverting the first switch the target holds %v (%v); want it empty, as before", entries, err)
	}

	// Someone removed the target, with no switch or revert under way: a
	// switch makes it again, and a revert puts the kept tree back.
	testbed.MustRun(t, "btrfs", "subvolume", "delete", app)
	if _, err := r.Switch(ctx, "s2"); err != nil {
		t.Fatalf("Switch(s2) with the target removed: %v", err)
	}
	replicaSameTree(t, "after Switch(s2) with the target removed", app, s2)
	testbed.MustRun(t, "btrfs", "subvolume", "delete", app)
	if _, err := r.Check(ctx, "true", nil); !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "no interrupted switch or revert explains it") {
		t.Fatalf("Check with the target removed: %v; want ErrInterrupted saying nothing explains it", err)
	}
	if err := r.Revert(ctx, "prev:s2"); err != nil {
		t.Fatalf("Revert(prev:s2) with the target removed: %v", err)
	}
	if entries, err := os.ReadDir(app); err != nil || len(entries) != 0 {
		t.Fatalf("after Revert(prev:s2) the target holds %v (%v); want it empty, as before Switch(s2)", entries, err)
	}

	// What interrupted checks and receives left goes with the next Forget
	// (or Receive); what a running one holds (its lock) stays.
	_, _, store := r.paths()
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", app, store+"/check-dead")
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", app, store+"/check-live")
	if err := os.MkdirAll(store+"/part-s3~dead/s3", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"check-dead.lock", "check-live.lock", "part-s3~dead.lock"} {
		if err := os.WriteFile(filepath.Join(store, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live, err := os.Open(store + "/check-live.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(ctx); err != nil {
		t.Fatal(err)
	}
	left := slices.DeleteFunc(replicaStore(t, r), func(e string) bool { return strings.HasPrefix(e, "recv-") || strings.HasPrefix(e, "gone-") })
	if !slices.Equal(left, []string{"check-live", "check-live.lock"}) {
		t.Errorf("after Forget() the store holds %q besides received snapshots; want only the live check's", left)
	}
	live.Close()
	if err := r.Forget(ctx); err != nil {
		t.Fatal(err)
	}
	if left := slices.DeleteFunc(replicaStore(t, r), func(e string) bool { return strings.HasPrefix(e, "check-") }); len(left) != len(replicaStore(t, r)) {
		t.Errorf("the store holds %q once the check's lock is free", replicaStore(t, r))
	}

	// The target's directory is not on btrfs.
	tmp := &Replica{Target: Target{Kind: TargetPath, Path: filepath.Join(t.TempDir(), "app")}}
	if err := tmp.Receive(ctx, "s1", src.send(nil, s1, nil)); !errors.Is(err, cowfs.ErrUnsupportedFS) || !strings.Contains(err.Error(), "tmpfs") {
		t.Errorf("Receive into a directory on tmpfs: %v; want ErrUnsupportedFS naming tmpfs", err)
	}
}

// TestReplicaUnreachable: nothing listens on the port.
func TestReplicaUnreachable(t *testing.T) {
	testbed.Require(t)
	sshd := testbed.StartSSHD(t) // for its keys (and lo up)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	target, err := ParseTarget("ssh://root@127.0.0.1:" + strconv.Itoa(port) + "/srv/app")
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{Target: target, SSHOptions: sshd.Options}
	start := time.Now()
	_, err = r.Has(context.Background(), "s1")
	t.Logf("Has on a closed port, in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), target.String()) || !strings.Contains(err.Error(), "Connection refused") {
		t.Fatalf("Has on a closed port: %v; want ErrUnreachable naming the target and why", err)
	}
	_, err = r.Switch(context.Background(), "s1")
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "switching the target to s1") {
		t.Fatalf("Switch on a closed port: %v; want ErrUnreachable saying what failed", err)
	}
}

// TestReplicaCancelled: cancelling the context stops a running check, on
// the replica's host too, and removes its snapshot; and it stops a receive,
// leaving nothing of it.
func TestReplicaCancelled(t *testing.T) {
	src := newReplicaSource(t)
	sshR, _ := sshReplica(t)
	mnt := testbed.SecondBtrfs(t)
	target, err := ParseTarget(filepath.Join(mnt, "app"))
	if err != nil {
		t.Fatal(err)
	}
	localR := &Replica{Target: target}
	src.write(map[string]string{"file": "x\n"})
	s1 := src.snapshot("s1")
	for _, r := range []*Replica{sshR, localR} {
		ctx := context.Background()
		if err := r.Receive(ctx, "s1", src.send(nil, s1, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Switch(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		marker := "sandboxd-cancel-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		start := time.Now()
		status, err := r.Check(ctx, "echo started; sleep 60; echo "+marker, io.Discard)
		cancel()
		took := time.Since(start)
		t.Logf("%s: a cancelled check returned in %v: %d, %v", r.Target.Kind, took.Round(time.Millisecond), status, err)
		if !errors.Is(err, context.DeadlineExceeded) || took > 10*time.Second {
			t.Fatalf("%s: Check cancelled after 1.5s: %d, %v after %v; want DeadlineExceeded, soon", r.Target.Kind, status, err, took)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			procs := replicaProcesses(t, marker)
			left := slices.DeleteFunc(replicaStore(t, r), func(e string) bool { return !strings.HasPrefix(e, "check-") })
			if len(procs) == 0 && len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: 10s after the cancelled check, processes %v still run it and the store holds %q", r.Target.Kind, procs, left)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: the check's processes and snapshot were gone %v after it was cancelled", r.Target.Kind, (time.Since(start) - took).Round(time.Millisecond))

		// A receive whose sender stalls half way, then is cancelled.
		var stream bytes.Buffer
		if err := src.b.Send(context.Background(), &stream, nil, s1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
		start = time.Now()
		err = r.Receive(ctx, "s9", func(w io.Writer) error {
			if _, err := w.Write(stream.Bytes()[:stream.Len()/2]); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
		cancel()
		t.Logf("%s: a cancelled receive returned in %v: %v", r.Target.Kind, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "receiving s9") {
			t.Fatalf("%s: Receive cancelled after 1.5s: %v; want DeadlineExceeded saying what it did", r.Target.Kind, err)
		}
		deadline = time.Now().Add(10 * time.Second)
		for {
			left := slices.DeleteFunc(replicaStore(t, r), func(e string) bool { return !strings.HasPrefix(e, "part-") })
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: 10s after the cancelled receive, the store holds %q", r.Target.Kind, left)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if has, err := r.Has(context.Background(), "s9"); err != nil || has {
			t.Fatalf("%s: Has(s9) after the cancelled receive: %v, %v", r.Target.Kind, has, err)
		}
	}
}

// replicaProcesses lists the pids whose command line holds s.
func replicaProcesses(t *testing.T, s string) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
