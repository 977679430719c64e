package integration

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// plainTree makes a plain directory at dir with what an adoption must
// keep: owners and modes, an xattr, hard links, a symlink, a socket, a
// sparse file.
func plainTree(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("index.html", "<h1>adopted</h1>\n", 0o644)
	write("conf/app.conf", "port = 8080\n", 0o640)
	if err := os.Chown(filepath.Join(dir, "conf/app.conf"), 1234, 4321); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(dir, "index.html"), "user.origin", []byte("host"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "index.html"), filepath.Join(dir, "index-link.html")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("conf/app.conf", filepath.Join(dir, "app.conf")); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "app.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	if err != nil || f.Truncate(1<<30) != nil {
		t.Fatal(err)
	}
	f.Close()
}

// describe is what a user checks of a tree: each entry's type, mode,
// owner, links, size and blocks used, xattr and content or target.
func describe(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d:%d", rel, st.Mode, st.Uid, st.Gid)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// (A directory's count is its filesystem's: btrfs says 1.)
			line += fmt.Sprintf(" links=%d", st.Nlink)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b := make([]byte, 64)
			n, _ := unix.Lgetxattr(p, "user.origin", b)
			data, _ := os.ReadFile(p)
			if len(data) > 100 {
				data = data[:0]
			}
			line += fmt.Sprintf(" size=%d sparse=%v xattr=%q %q", st.Size, st.Blocks*512 < st.Size, b[:max(n, 0)], data)
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Adopting a plain directory, on the pool's btrfs (a subvolume swapped
// in) and elsewhere (a volume of the pool mounted back): the host sees
// the same files at the same path, sandboxes see them there, a promotion
// reaches the host there, and release leaves a plain directory with the
// promoted change.
func TestAdoptADirectoryWhereItLives(t *testing.T) {
	tb := install(t)
	for _, c := range []struct{ name, dir, how string }{
		{"adopt-swap", filepath.Join(tb.Btrfs.Mount, "srv-swap"), "a subvolume"},
		{"adopt-mount", "/srv/adopt-mount", "a mount"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(c.dir)
			plainTree(t, c.dir)
			t.Cleanup(func() { ctl(t, "", "project", "release", c.name); os.RemoveAll(c.dir) })
			before := describe(t, c.dir)
			ok(t, "project", "adopt", c.name, c.dir)
			if got := describe(t, c.dir); got != before {
				t.Fatalf("the host's view of %s changed with the adoption:\n%s\nwant:\n%s", c.dir, got, before)
			}
			switch c.how {
			case "a subvolume":
				if out, err := exec.Command("btrfs", "subvolume", "show", c.dir).CombinedOutput(); err != nil {
					t.Errorf("%s is not a subvolume after the adoption: %v %s", c.dir, err, out)
				}
			case "a mount":
				unit := strings.TrimSpace(testbed.MustRun(t, "systemd-escape", "--path", "--suffix=mount", c.dir))
				if st := strings.TrimSpace(testbed.MustRun(t, "systemctl", "is-enabled", unit)); st != "enabled" {
					t.Errorf("the mount unit %s is %s, want enabled (for every boot)", unit, st)
				}
			}
			id := strings.TrimSpace(ok(t, "create", "--quiet", c.name))
			// (Another user's file is nobody's inside a sandbox with a
			// user namespace: the host's view is checked above.)
			if out := ok(t, "exec", id, "--", "sh", "-c", "pwd; cat index.html; ls conf"); out != c.dir+"\n<h1>adopted</h1>\napp.conf\n" {
				t.Errorf("the sandbox's view of the project: %q", out)
			}
			ok(t, "exec", id, "--", "sh", "-c", "echo 'port = 9090' > conf/new.conf")
			ok(t, "promote", id)
			if b, err := os.ReadFile(filepath.Join(c.dir, "conf/new.conf")); err != nil || string(b) != "port = 9090\n" {
				t.Errorf("the promoted file on the host at %s: %q, %v", c.dir, b, err)
			}
			ok(t, "destroy", id)
			ok(t, "project", "release", c.name)
			if out, err := exec.Command("btrfs", "subvolume", "show", c.dir).CombinedOutput(); err == nil {
				t.Errorf("%s is still a subvolume after the release: %s", c.dir, out)
			}
			if out, _ := exec.Command("findmnt", "-n", c.dir).CombinedOutput(); len(out) > 0 {
				t.Errorf("%s is still a mount point after the release: %s", c.dir, out)
			}
			if b, err := os.ReadFile(filepath.Join(c.dir, "conf/new.conf")); err != nil || string(b) != "port = 9090\n" {
				t.Errorf("after the release, the promoted file at %s: %q, %v", c.dir, b, err)
			}
			fails(t, 3, c.name, "create", c.name)
		})
	}
}

// What cannot be adopted is refused by name, and nothing moves.
func TestAdoptRefusesWhatItMustNot(t *testing.T) {
	tb := install(t)
	dir := filepath.Join(tb.Btrfs.Mount, "srv-busy")
	os.RemoveAll(dir)
	plainTree(t, dir)
	t.Cleanup(func() { os.RemoveAll(dir) })
	before := describe(t, dir)
	fails(t, 2, "/ cannot be a project", "project", "adopt", "root", "/")
	fails(t, 2, "mount point", "project", "adopt", "mnt", tb.Btrfs.Mount)
	if err := os.MkdirAll(filepath.Join(tb.Btrfs.Project, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(tb.Btrfs.Project, "sub")) })
	fails(t, 2, "one inside the other", "project", "adopt", "inweb", filepath.Join(tb.Btrfs.Project, "sub"))
	fails(t, 2, "not a directory", "project", "adopt", "file", filepath.Join(dir, "index.html"))
	fails(t, 2, "is a symlink", "project", "adopt", "link", filepath.Join(dir, "app.conf"))
	fails(t, 2, "not a valid name", "project", "adopt", "../x", dir)
	fails(t, 5, "pick another name", "project", "adopt", "web", dir)
	// Where a user could rename what root acts on by name (the directory,
	// the temporary names beside it, a directory in its tree while root
	// copies it), nothing is adopted: the attack needs no more than that.
	userParent := filepath.Join(tb.Btrfs.Mount, "srv-user")
	os.RemoveAll(userParent)
	plainTree(t, filepath.Join(userParent, "web"))
	t.Cleanup(func() { os.RemoveAll(userParent) })
	if err := os.Chown(userParent, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	fails(t, 2, "owned by uid 1000, not root", "project", "adopt", "userparent", filepath.Join(userParent, "web"))
	if err := os.Chown(userParent, 0, 0); err != nil || os.Chown(filepath.Join(userParent, "web", "conf"), 1000, 1000) != nil {
		t.Fatal(err)
	}
	// (A user's directory inside root's tree is adopted by descriptor
	// since issue 29: TestRootAdoptsAnyOwnersDirectory.)
	if err := os.Chmod(userParent, 0o777); err != nil {
		t.Fatal(err)
	}
	fails(t, 2, "writable by anyone", "project", "adopt", "worldparent", filepath.Join(userParent, "web"))
	// In use: a process with its working directory there is named.
	sleep := exec.Command("sleep", "300")
	sleep.Dir = dir
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	fails(t, 5, fmt.Sprintf("pid %d \\(sleep\\)", sleep.Process.Pid), "project", "adopt", "busy", dir)
	if got := describe(t, dir); got != before {
		t.Errorf("a refused adoption changed %s:\n%s\nwant:\n%s", dir, got, before)
	}
	if left, _ := filepath.Glob(filepath.Join(tb.Btrfs.Mount, ".srv-busy*")); len(left) > 0 {
		t.Errorf("a refused adoption left %v", left)
	}
}

// A kill -9 at each step of an adoption leaves the directory whole at its
// path, and the project adopted only once the volume had taken its place.
func TestKill9AtEachStepOfAnAdoption(t *testing.T) {
	tb := install(t)
	for _, c := range []struct {
		name string
		dirs []string
	}{
		{"crash-swap", []string{filepath.Join(tb.Btrfs.Mount, "srv-crash")}},
		{"crash-mount", []string{"/srv/adopt-crash"}},
		{"crash-two", []string{"/srv/adopt-crash-app", "/srv/adopt-crash-data"}},
		// A user's, in its home: by descriptor (issue 29).
		{"crash-owned", []string{"/home/adopt-crash/calc"}},
		// A service account's data under root-only parents: copied by
		// descriptor, bound back by a mount unit.
		{"crash-owned-unit", []string{"/var/lib/adopt-crash-svc"}},
	} {
		points := crashpoint.Adoption
		if len(c.dirs) > 1 {
			points = crashpoint.AdoptionOfSeveral
		}
		if strings.HasPrefix(c.name, "crash-owned") {
			// Copied by descriptor: a crash mid-copy too.
			points = append([]string{crashpoint.AdoptCopying}, points...)
		}
		for _, point := range points {
			t.Run(c.name+"/"+point, func(t *testing.T) {
				before := map[string]string{}
				for _, d := range c.dirs {
					os.RemoveAll(d)
					plainTree(t, d)
					ownedByUser(t, d)
					before[d] = describe(t, d)
				}
				t.Cleanup(func() {
					ctl(t, "", "project", "release", c.name)
					for _, d := range c.dirs {
						os.RemoveAll(d)
					}
				})
				reconfigure(t, "", crashpoint.Env+"="+point)
				old := mainPID(t)
				ctl(t, "", append([]string{"project", "adopt", c.name}, c.dirs...)...) // the daemon dies under it
				waitActive(t, old)
				for _, d := range c.dirs {
					if got := describe(t, d); got != before[d] {
						t.Fatalf("killed at %s: %s is not whole:\n%s\nwant:\n%s", point, d, got, before[d])
					}
				}
				_, _, code := ctl(t, "", "create", "--quiet", "--name", "after-"+c.name, c.name)
				adopted := code == 0
				if adopted {
					ctl(t, "", "destroy", "after-"+c.name)
				}
				if want := point == crashpoint.AdoptSwitched || point == crashpoint.AdoptBoundOne; adopted != want {
					t.Errorf("killed at %s: the project is adopted: %v, want %v", point, adopted, want)
				}
				for _, d := range c.dirs {
					// (The rest of several is bound back once the daemon is up.)
					mounted, _ := exec.Command("findmnt", "-n", d).CombinedOutput()
					for end := time.Now().Add(10 * time.Second); adopted && len(mounted) == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
						mounted, _ = exec.Command("findmnt", "-n", d).CombinedOutput()
					}
					if c.name != "crash-swap" && (len(mounted) > 0) != adopted {
						t.Errorf("killed at %s: %s is a mount point: %v, want %v", point, d, len(mounted) > 0, adopted)
					}
					if left, _ := filepath.Glob(filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".sandboxd-*")); len(left) > 0 {
						t.Errorf("killed at %s: left %v", point, left)
					}
					if c.name == "crash-owned-unit" && exists(unitFileOf(t, d)) != adopted {
						t.Errorf("killed at %s: a mount unit for %s: %v, want %v", point, d, exists(unitFileOf(t, d)), adopted)
					}
				}
			})
		}
	}
	reconfigure(t, "")
}

// A directory a service uses is refused, naming the service; asked, the
// service is stopped for the adoption and started again, on the adopted
// directory.
func TestAdoptRestartsTheServicesThatUseIt(t *testing.T) {
	tb := install(t)
	dir := filepath.Join(tb.Btrfs.Mount, "srv-held")
	os.RemoveAll(dir)
	plainTree(t, dir)
	const unit = "adopt-holder.service"
	// A service of a unit file (a transient one is gone once stopped),
	// that says it is ready from its working directory: its start (the
	// test's, the adoption's) ends only once it works there, however
	// loaded the machine (a plain one's ends once it is forked).
	unitFile := filepath.Join("/run/systemd/system", unit)
	if err := os.WriteFile(unitFile, []byte("[Service]\nType=notify\nWorkingDirectory="+dir+"\nExecStart="+readyHolder+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "daemon-reload")
	testbed.MustRun(t, "systemctl", "start", unit)
	t.Cleanup(func() {
		exec.Command("systemctl", "stop", unit).Run()
		os.Remove(unitFile)
		exec.Command("systemctl", "daemon-reload").Run()
		ctl(t, "", "project", "release", "held")
		os.RemoveAll(dir)
	})
	fails(t, 5, "of unit "+unit, "project", "adopt", "held", dir)
	ok(t, "project", "adopt", "--restart-units", "held", dir)
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", unit).Output()))); st != "active" {
		t.Fatalf("%s after the adoption: %s, want active again", unit, st)
	}
	pid := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", unit))
	var cwd, now unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/cwd", &cwd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(dir, &now); err != nil {
		t.Fatal(err)
	}
	if cwd.Ino != now.Ino || cwd.Dev != now.Dev {
		t.Errorf("the restarted service works in the old directory (inode %d), not the adopted one (%d)", cwd.Ino, now.Ino)
	}
}

// readyHolder is a service's ExecStart that tells systemd READY=1 from
// its main process (systemd-notify, a child that ends at once, may not be
// taken as the service's) once it works in its WorkingDirectory, then
// waits.
const readyHolder = `/usr/bin/python3 -c 'import os, socket, time; a = os.environ["NOTIFY_SOCKET"]; ` +
	`s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b"READY=1", chr(0) + a[1:] if a[0] == "@" else a); time.sleep(600)'`

// A kill -9 at each step of a release leaves, once the daemon is back, a
// plain directory at the path with the project's files, the project
// gone, and nothing of its volume or mount.
func TestKill9AtEachStepOfARelease(t *testing.T) {
	tb := install(t)
	for _, c := range []struct {
		name string
		dirs []string
	}{
		{"release-swap", []string{filepath.Join(tb.Btrfs.Mount, "srv-release")}},
		{"release-mount", []string{"/srv/adopt-release"}},
		{"release-two", []string{"/srv/adopt-release-app", "/srv/adopt-release-data"}},
		{"release-owned", []string{"/home/adopt-release/calc"}},
		{"release-owned-unit", []string{"/var/lib/adopt-release-svc"}},
	} {
		points := crashpoint.Release
		if strings.HasPrefix(c.name, "release-owned") {
			// Unmounted (its unit removed) before the files go back.
			points = append([]string{points[0], crashpoint.ReleaseUnmounted}, points[1:]...)
		}
		for _, point := range points {
			t.Run(c.name+"/"+point, func(t *testing.T) {
				for _, d := range c.dirs {
					os.RemoveAll(d)
					plainTree(t, d)
					ownedByUser(t, d)
				}
				t.Cleanup(func() {
					ctl(t, "", "project", "release", c.name)
					for _, d := range c.dirs {
						os.RemoveAll(d)
					}
				})
				reconfigure(t, "")
				ok(t, append([]string{"project", "adopt", c.name}, c.dirs...)...)
				want := map[string]string{}
				for _, d := range c.dirs {
					want[d] = describe(t, d)
				}
				reconfigure(t, "", crashpoint.Env+"="+point)
				old := mainPID(t)
				ctl(t, "", "project", "release", c.name) // the daemon dies under it
				waitActive(t, old)
				for _, d := range c.dirs {
					if got := describe(t, d); got != want[d] {
						t.Fatalf("killed at %s: %s after the restart:\n%s\nwant:\n%s", point, d, got, want[d])
					}
					if out, err := exec.Command("btrfs", "subvolume", "show", d).CombinedOutput(); err == nil {
						t.Errorf("killed at %s: %s is still a subvolume: %s", point, d, out)
					}
					if mounted, _ := exec.Command("findmnt", "-n", d).CombinedOutput(); len(mounted) > 0 {
						t.Errorf("killed at %s: %s is still a mount point: %s", point, d, mounted)
					}
					if exists(unitFileOf(t, d)) {
						t.Errorf("killed at %s: the mount unit of %s is left", point, d)
					}
				}
				fails(t, 3, c.name, "create", c.name)
				var left []string
				for _, d := range c.dirs {
					l, _ := filepath.Glob(filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".sandboxd-*"))
					left = append(left, l...)
				}
				if vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", c.name); exists(vol) {
					left = append(left, vol)
				}
				if len(left) > 0 {
					t.Errorf("killed at %s: left %v", point, left)
				}
			})
		}
	}
	reconfigure(t, "")
}

// ownedByUser gives d, under /home, and its parent to uid 1000: a
// user's project in its home, which the daemon adopts by descriptor;
// d under /var/lib alone (a service's data, its parent root's).
func ownedByUser(t *testing.T, d string) {
	t.Helper()
	if strings.HasPrefix(d, "/var/lib/") {
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !strings.HasPrefix(d, "/home/") {
		return
	}
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
