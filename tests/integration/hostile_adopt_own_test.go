package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
)

// A member adopting its own directory owns every path the daemon acts
// on below its home: it may swap any of them for a symlink to a
// root-only place at any moment. These tests land each swap at a step
// of the adoption and of the release (the daemon paused there:
// crashpoint.PauseEnv), having shown first that the member can make the
// swap and that the symlink leads where it aims; the member gains
// nothing: no root-owned or foreign content in its project, nothing
// mounted over, emptied or written outside its directory.

const hostileOwner = "adopt-hostile"

// rootSecret makes a root-only directory (mode 700, like /root, and
// small) with a secret file, and returns the file's path and content.
func rootSecret(t *testing.T) (string, string) {
	t.Helper()
	dir := filepath.Join("/var/tmp", "adopt-rootonly-"+suffix())
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	text := "ROOT SECRET " + suffix() + "\n"
	p := filepath.Join(dir, "secret")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, text
}

// pausedAt runs sandboxctl args as the member (as root with asRoot)
// while the daemon is armed to pause at point; once it waits there,
// plant runs (as the member), then the daemon goes on. It returns
// sandboxctl's stderr and status.
func pausedAt(t *testing.T, asRoot bool, point, plant string, args ...string) (string, int) {
	t.Helper()
	reconfigure(t, "", crashpoint.PauseEnv+"="+point)
	paused := crashpoint.PausedIn("/run/sandboxd", point)
	type result struct {
		errOut string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		if asRoot {
			_, errOut, code := ctl(t, "", args...)
			done <- result{errOut, code}
			return
		}
		_, errOut, code := ctlAs(t, hostileOwner, args...)
		done <- result{errOut, code}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !exists(paused) {
		select {
		case r := <-done:
			t.Fatalf("sandboxctl %s ended before pausing at %s: exit %d: %s", strings.Join(args, " "), point, r.code, r.errOut)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not pause at %s within 2 minutes", point)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := asMember(t, hostileOwner, "set -e\n"+plant+"\necho PLANTED"); !strings.Contains(out, "PLANTED") {
		t.Fatalf("planting at %s: %s", point, out)
	}
	if err := os.Remove(paused); err != nil {
		t.Fatal(err)
	}
	r := <-done
	return r.errOut, r.code
}

// noForeignContent fails if any entry below dir is not uid's or holds
// secret.
func noForeignContent(t *testing.T, dir string, uid uint32, secret string) {
	t.Helper()
	if !exists(dir) {
		return
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Uid != uid {
			t.Errorf("%s in the member's project is uid %d's", p, st.Uid)
		}
		if d.Type().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(secret)) {
				t.Errorf("%s in the member's project holds root's secret", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// unchanged notes what the member aims at, to check it is as it was.
func unchanged(t *testing.T, dirs ...string) func() {
	t.Helper()
	list := func() string {
		var b strings.Builder
		for _, d := range dirs {
			entries, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s mounted=%v:", d, mounted(d))
			for _, e := range entries {
				b.WriteString(" " + e.Name())
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	before := list()
	return func() {
		t.Helper()
		if after := list(); after != before {
			t.Errorf("what the member aimed at changed:\n%s\nwas:\n%s", after, before)
		}
	}
}

// TestHostileAdoptOwnSymlinkSwapsGainNothing: at each step of its own
// adoption the member swaps its directory (or a directory inside it) for
// a symlink to /etc or to a root-only directory. Control: the member can make each swap,
// and through it reaches the root-only place's names.
func TestHostileAdoptOwnSymlinkSwapsGainNothing(t *testing.T) {
	tb := install(t)
	uid, gid := groupMember(t, hostileOwner)
	reconfigure(t, "")
	secret, text := rootSecret(t)
	rootOnly := filepath.Dir(secret)
	home := "/home/" + hostileOwner
	calc := calcProject(t, hostileOwner, uid, gid, home)
	// Control: the swaps work, outside any adoption.
	if out := asMember(t, hostileOwner, fmt.Sprintf("cd %s && mkdir lib && mv lib lib.real && ln -s %s lib && ls -d lib/ && rm lib && mv lib.real lib && mv %s %s.real && ln -s /etc %s && ls %s/hostname && rm %s && mv %s.real %s && echo SWAPPED",
		calc, rootOnly, calc, calc, calc, calc, calc, calc, calc)); !strings.Contains(out, "SWAPPED") || !strings.Contains(out, "/hostname") {
		t.Fatalf("the member cannot make the swaps outside an adoption: %s", out)
	}
	check := unchanged(t, "/etc", "/root", rootOnly)
	for _, c := range []struct {
		point, plant string
		root         bool // root adopts the user's directory (owners kept, none refused)
	}{
		// Mid-copy: a directory inside, its names listed, swapped.
		{crashpoint.AdoptCopying, "cd " + calc + " && mv lib lib.real && ln -s " + rootOnly + " lib", false},
		{crashpoint.AdoptCopying, "cd " + calc + " && mv lib lib.real && ln -s " + rootOnly + " lib", true},
		// Copied, not yet switched: the directory itself swapped.
		{crashpoint.AdoptCopied, "mv " + calc + " " + calc + ".real && ln -s /etc " + calc, false},
		// Recorded switching, about to mount: the same.
		{crashpoint.AdoptSwitching, "mv " + calc + " " + calc + ".real && ln -s /etc " + calc, false},
		{crashpoint.AdoptSwitching, "mv " + calc + " " + calc + ".real && ln -s /etc " + calc, true},
	} {
		name := "hostile-" + c.point
		if c.root {
			name += "-by-root"
		}
		t.Run(name, func(t *testing.T) {
			t.Cleanup(func() { ctl(t, "", "project", "release", name) })
			asMember(t, hostileOwner, fmt.Sprintf("cd %s && rm -rf calc.real && (test -L calc && rm calc || true) && test -d calc && mkdir -p calc/lib && echo lib > calc/lib/f", home))
			errOut, code := pausedAt(t, c.root, c.point, c.plant, "project", "adopt", name, calc)
			t.Logf("adopt with %q at %s: exit %d: %s", c.plant, c.point, code, errOut)
			vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", name)
			if code == 0 {
				// Adopted as it was when listed: lib came in as the
				// member's symlink (or not at all), never as /root.
				noForeignContent(t, vol, uid, text)
			} else if exists(vol) {
				t.Errorf("a failed adoption left its volume %s", vol)
			}
			for _, p := range []string{"/etc", "/root", rootOnly} {
				if mounted(p) {
					t.Errorf("%s is a mount point after the adoption", p)
				}
			}
			// The member puts its directory back for the next step.
			asMember(t, hostileOwner, fmt.Sprintf("cd %s && if test -L calc; then rm calc && mv calc.real calc; fi; cd calc && if test -L lib; then rm lib && mv lib.real lib; fi; true", home))
		})
	}
	check()
}

// TestHostileReleaseOwnSymlinkSwapGainsNothing: with its project
// unmounted, the member swaps its directory for a symlink to /etc before
// the files are copied back. Nothing in /etc is emptied or written; the
// release stops, and the next start of the daemon finishes it once the
// directory is back.
func TestHostileReleaseOwnSymlinkSwapGainsNothing(t *testing.T) {
	tb := install(t)
	const name = "hostile-release"
	calc := ownCalcAdopted(t, name)
	check := unchanged(t, "/etc")
	errOut, code := pausedAt(t, false, crashpoint.ReleaseUnmounted, "mv "+calc+" "+calc+".real && ln -s /etc "+calc, "project", "release", name)
	if code == 0 {
		t.Errorf("the release went on through a symlink to /etc: %s", errOut)
	}
	check()
	for _, f := range []string{"calc.py", "test_calc.py"} {
		if exists(filepath.Join("/etc", f)) {
			t.Errorf("/etc/%s was written by the release", f)
		}
	}
	// Back as it was, the daemon's next start finishes the release.
	asMember(t, hostileOwner, "rm "+calc+" && mv "+calc+".real "+calc)
	reconfigure(t, "")
	if mounted(calc) || !exists(filepath.Join(calc, "calc.py")) {
		t.Errorf("after the next start: %s mounted %v, calc.py there %v", calc, mounted(calc), exists(filepath.Join(calc, "calc.py")))
	}
	if vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", name); exists(vol) {
		t.Errorf("the finished release left %s", vol)
	}
}

// TestHostileAdoptOwnRefusals: a member adopting a directory it does not
// own, its own holding a root file or a hard link of root's file, or
// asking for others' access or host services stopped, is refused, named,
// with nothing moved; it may not release another's adoption. Control:
// each of those it can read, and its own plain directory it adopts
// (TestMemberAdoptsItsOwnProject).
func TestHostileAdoptOwnRefusals(t *testing.T) {
	tb := install(t)
	uid, gid := groupMember(t, hostileOwner)
	otherUID, otherGID := groupMember(t, "adopt-other")
	reconfigure(t, "")
	home := "/home/" + hostileOwner
	calc := calcProject(t, hostileOwner, uid, gid, home)
	other := calcProject(t, "adopt-other", otherUID, otherGID, "/home/adopt-other")
	secret, _ := rootSecret(t)
	if err := os.Chmod(secret, 0o644); err != nil { // readable: the member could copy it, not own it
		t.Fatal(err)
	}
	refused := func(want string, args ...string) {
		t.Helper()
		_, errOut, code := ctlAs(t, hostileOwner, args...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("sandboxctl %s as the member: exit %d: %s; want it refused saying %q", strings.Join(args, " "), code, errOut, want)
		}
		if p := args[len(args)-1]; args[1] == "adopt" && mounted(p) {
			t.Errorf("%s is mounted after a refused adoption", p)
		}
		if args[1] != "adopt" {
			return
		}
		if vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", args[len(args)-2]); exists(vol) {
			t.Errorf("a refused adoption left %s", vol)
		}
	}
	if out := asMember(t, hostileOwner, "cat "+filepath.Join(other, "calc.py")); !strings.Contains(out, "a - b") {
		t.Fatalf("control: the member cannot read the other's calc.py: %s", out)
	}
	refused(fmt.Sprintf("%s is owned by uid %d, not by you (uid %d)", other, otherUID, uid), "project", "adopt", "not-mine", other)
	refused("is for root and admins", "project", "adopt", "--restart-units", "units", calc)
	refused("are for root and admins", "project", "adopt", "--user", "adopt-other", "others", calc)

	rootFile := filepath.Join(calc, "root-file")
	if err := os.WriteFile(rootFile, []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(rootFile+" is owned by uid 0, not by you", "project", "adopt", "root-file", calc)
	os.Remove(rootFile)
	// A hard link of root's file (what fs.protected_hardlinks=0 lets a
	// user make, or one left from before): refused, named.
	link := filepath.Join(calc, "secret-link")
	if err := os.Link(secret, link); err != nil {
		t.Fatal(err)
	}
	refused(link+" is owned by uid 0, not by you", "project", "adopt", "hard-link", calc)
	os.Remove(link)

	// Another's adoption: not the member's to release.
	const theirs = "adopt-theirs"
	t.Cleanup(func() { ctl(t, "", "project", "release", theirs) })
	okAs(t, "adopt-other", "project", "adopt", theirs, other)
	refused("did not adopt it", "project", "release", theirs)
	if !mounted(other) {
		t.Errorf("the other's adoption was undone by the member's refused release")
	}
	okAs(t, "adopt-other", "project", "release", theirs)
}

// TestHostileRemountAtStartFollowsNoSymlink: the daemon mounts an
// owned adoption again when it starts (after a reboot: here, the mount
// taken away by hand). Its owner, who may rename its directory then,
// swaps it for a symlink to /etc: nothing is mounted over /etc. Back as
// a directory, the next start mounts the project there again.
func TestHostileRemountAtStartFollowsNoSymlink(t *testing.T) {
	install(t)
	const name = "hostile-remount"
	calc := ownCalcAdopted(t, name)
	// Control: the mount is made again at start.
	if out, err := exec.Command("umount", calc).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v %s", calc, err, out)
	}
	reconfigure(t, "")
	if !mounted(calc) {
		t.Fatalf("the daemon's start did not mount %s again", calc)
	}
	if out, err := exec.Command("umount", calc).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v %s", calc, err, out)
	}
	check := unchanged(t, "/etc")
	asMember(t, hostileOwner, "mv "+calc+" "+calc+".real && ln -s /etc "+calc)
	reconfigure(t, "")
	check()
	if mounted("/etc") {
		t.Errorf("the daemon's start mounted the project over /etc")
	}
	asMember(t, hostileOwner, "rm "+calc+" && mv "+calc+".real "+calc)
	reconfigure(t, "")
	if !mounted(calc) || !exists(filepath.Join(calc, "calc.py")) {
		t.Errorf("back as a directory, %s after the next start: mounted %v", calc, mounted(calc))
	}
}

// TestHostileReleaseOwnEmptiesNothingOfAnothers: once its mount is gone,
// a release empties the directory underneath. The member moves in a
// directory of another user's that it may rename (writable to it) but
// whose subdirectory it may not empty: root would have emptied it for
// it. Control: the member cannot remove the other's file itself. The
// release is refused, naming the entry; the other's file stays.
func TestHostileReleaseOwnEmptiesNothingOfAnothers(t *testing.T) {
	install(t)
	uid, gid := groupMember(t, hostileOwner)
	otherUID, otherGID := groupMember(t, "adopt-victim")
	reconfigure(t, "")
	calc := calcProject(t, hostileOwner, uid, gid, "/home/"+hostileOwner)
	parent, err := os.MkdirTemp("/var/tmp", "release-victim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	victim := filepath.Join(parent, "shared")
	keep := filepath.Join(victim, "keep")
	for _, d := range []string{victim, keep} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, int(otherUID), int(otherGID)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(keep, "data")
	if err := os.WriteFile(data, []byte("the other's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Chown(data, int(otherUID), int(otherGID)), os.Chmod(parent, 0o777), os.Chmod(victim, 0o777)); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.Command("setpriv", "--reuid="+hostileOwner, "--regid="+hostileOwner, "--init-groups", "rm", "-f", data).CombinedOutput(); err == nil || !exists(data) {
		t.Fatalf("control: the member removed the other's %s itself", data)
	}
	const name = "hostile-release-others"
	t.Cleanup(func() { ctl(t, "", "project", "release", name) })
	okAs(t, hostileOwner, "project", "adopt", name, calc)
	errOut, code := pausedAt(t, false, crashpoint.ReleaseUnmounted, "mv "+victim+" "+calc+"/shared", "project", "release", name)
	if code == 0 || !strings.Contains(errOut, fmt.Sprintf("owned by uid %d", otherUID)) {
		t.Errorf("the release emptied another's directory the member moved in: exit %d: %s", code, errOut)
	}
	if moved := filepath.Join(calc, "shared", "keep", "data"); !exists(moved) {
		t.Errorf("the other's %s was removed by the release", moved)
	}
	// Moved out again, the daemon's next start finishes the release.
	asMember(t, hostileOwner, "mv "+calc+"/shared "+victim)
	reconfigure(t, "")
	if mounted(calc) || !exists(filepath.Join(calc, "calc.py")) {
		t.Errorf("after the next start: %s mounted %v, calc.py there %v", calc, mounted(calc), exists(filepath.Join(calc, "calc.py")))
	}
}
