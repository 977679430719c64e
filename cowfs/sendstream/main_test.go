package sendstream_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs/sendstream"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The real-stream tests need btrfs; FuzzReader does not, but a package has
// one TestMain, so it runs inside the testbed too.
func TestMain(m *testing.M) { testbed.Main(m) }

// run runs a command and returns its standard output; a failure fails the
// test with what it printed on standard error.
func run(t testing.TB, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// subvolume makes a btrfs subvolume in the testbed, deleted when the test
// ends.
func subvolume(t testing.TB, name string) string {
	t.Helper()
	tb := testbed.Require(t)
	path := filepath.Join(tb.Btrfs.Mount, name)
	run(t, nil, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { run(t, nil, "btrfs", "subvolume", "delete", path) })
	return path
}

// snapshot makes a read-only snapshot of src next to it, deleted when the
// test ends (before src: cleanups run last first).
func snapshot(t testing.TB, src, name string) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(src), name)
	run(t, nil, "btrfs", "subvolume", "snapshot", "-r", src, path)
	t.Cleanup(func() { run(t, nil, "btrfs", "subvolume", "delete", path) })
	return path
}

// send runs the real `btrfs send`, version 1, with extra arguments (-p,
// --no-data) before the snapshot.
func send(t testing.TB, snap string, args ...string) []byte {
	t.Helper()
	args = append(append([]string{"send", "-q", "--proto", "1"}, args...), snap)
	return run(t, nil, "btrfs", args...)
}

// receiveDump is what the real `btrfs receive --dump` prints for stream.
func receiveDump(t testing.TB, stream []byte) string {
	t.Helper()
	return string(run(t, stream, "btrfs", "receive", "--dump"))
}

// dump is what our Dumper prints for stream, which must parse to its end.
func dump(t testing.TB, stream []byte) string {
	t.Helper()
	r, err := sendstream.NewReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatalf("reading the stream header: %v", err)
	}
	var out bytes.Buffer
	d := sendstream.NewDumper(&out)
	for {
		c, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out.String()
		}
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if err := d.Dump(c); err != nil {
			t.Fatalf("dumping: %v", err)
		}
	}
}

// sameLines fails the test at the first line where got and want differ.
func sameLines(t testing.TB, what, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			t.Fatalf("%s: line %d differs (%d lines from us, %d from btrfs receive --dump):\n ours: %q\nbtrfs: %q", what, i+1, len(g), len(w), gl, wl)
		}
	}
}

// files writes files relative to dir, making parent directories.
type files struct {
	t   testing.TB
	dir string
}

func (f files) path(name string) string { return filepath.Join(f.dir, name) }

func (f files) write(name string, data []byte) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.path(name)), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.path(name), data, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// writeAt writes data at off in an existing or new file, without
// truncating it.
func (f files) writeAt(name string, off int64, data []byte) {
	f.t.Helper()
	fd, err := os.OpenFile(f.path(name), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(data, off); err != nil {
		f.t.Fatal(err)
	}
}

func (f files) mkdir(name string) {
	f.t.Helper()
	if err := os.MkdirAll(f.path(name), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f files) do(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f files) rename(from, to string) { f.t.Helper(); f.do(os.Rename(f.path(from), f.path(to))) }
func (f files) remove(name string)     { f.t.Helper(); f.do(os.RemoveAll(f.path(name))) }
func (f files) symlink(target, name string) {
	f.t.Helper()
	f.do(os.Symlink(target, f.path(name)))
}
func (f files) link(existing, name string) {
	f.t.Helper()
	f.do(os.Link(f.path(existing), f.path(name)))
}
func (f files) truncate(name string, size int64) { f.t.Helper(); f.do(os.Truncate(f.path(name), size)) }
func (f files) chmod(name string, mode os.FileMode) {
	f.t.Helper()
	f.do(os.Chmod(f.path(name), mode))
}
func (f files) chown(name string, uid, gid int) {
	f.t.Helper()
	f.do(os.Lchown(f.path(name), uid, gid))
}
func (f files) setxattr(name, attr, value string) {
	f.t.Helper()
	f.do(syscall.Setxattr(f.path(name), attr, []byte(value), 0))
}
func (f files) removexattr(name, attr string) {
	f.t.Helper()
	f.do(syscall.Removexattr(f.path(name), attr))
}
func (f files) mknod(name string, mode uint32, major, minor uint64) {
	f.t.Helper()
	// glibc's makedev.
	dev := (major&0xfffff000)<<32 | (major&0xfff)<<8 | (minor&0xffffff00)<<12 | minor&0xff
	f.do(syscall.Mknod(f.path(name), mode, int(dev)))
}
func (f files) reflink(src, dst string) {
	f.t.Helper()
	run(f.t, nil, "cp", "--reflink=always", f.path(src), f.path(dst))
}

// random is n bytes of deterministic noise (incompressible, unlike zeros).
func random(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}
