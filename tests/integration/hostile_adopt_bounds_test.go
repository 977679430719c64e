package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
)

// What a member's own adoptions may take of the pool: each holds a copy
// of the directory's files there, so a member who could adopt without
// bound would fill the pool that every sandbox writes to.

// TestHostileAdoptOwnCountBounded: a member hard-links one file of its
// own into nine directories (its home holds the file once) and adopts
// them, the last three at once. Control: each adoption copies the whole
// file into the pool (its volume's file is another inode, of the file's
// size), so the pool takes the file once per directory. At most
// limits.max_adoptions_per_user (8 by default) are adopted, those under
// way counted: the ninth is refused, named, nothing mounted or left.
// The bound is the member's: root adopts the ninth for it, and once the
// member releases one it adopts again.
func TestHostileAdoptOwnCountBounded(t *testing.T) {
	tb := install(t)
	const member = "adopt-bounds"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	home := "/home/" + member
	memberHome(t, home, uid, gid)
	const n, size = 9, 4 << 20
	script := fmt.Sprintf("set -e\ncd %s\nhead -c %d /dev/urandom > big\n", home, size)
	var dirs, names []string
	for i := range n {
		d := filepath.Join(home, fmt.Sprintf("d%d", i))
		script += fmt.Sprintf("mkdir %s && ln big %s/big\n", d, d)
		dirs, names = append(dirs, d), append(names, fmt.Sprintf("bounds-%d", i))
	}
	if out := asMember(t, member, script+"echo MADE"); !strings.Contains(out, "MADE") {
		t.Fatalf("the member's directories: %s", out)
	}
	t.Cleanup(func() {
		for _, name := range names {
			ctl(t, "", "project", "release", name)
		}
		ctl(t, "", "project", "release", "bounds-by-root")
	})

	// Six one after the other, then three at once (within the four
	// heavy calls a caller may run): a count of the adoptions done alone
	// would let each of the three in.
	type result struct {
		errOut string
		code   int
	}
	results := make([]result, n)
	adopt := func(i int) {
		_, errOut, code := ctlAs(t, member, "project", "adopt", names[i], dirs[i])
		results[i] = result{errOut, code}
	}
	for i := range n - 3 {
		adopt(i)
	}
	var wg sync.WaitGroup
	for i := n - 3; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adopt(i)
		}()
	}
	wg.Wait()
	var refused []int
	for i, r := range results {
		vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", names[i])
		if r.code == 0 {
			// Control: the pool holds a copy of its own of the file.
			var orig, copied unix.Stat_t
			if err := unix.Stat(filepath.Join(home, "big"), &orig); err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(filepath.Join(vol, "big"), &copied); err != nil {
				t.Fatalf("adopted %s: its volume's copy of big: %v", dirs[i], err)
			}
			if copied.Ino == orig.Ino || copied.Size != size {
				t.Errorf("adopted %s: the volume's big is inode %d of %d bytes; the member's, %d", dirs[i], copied.Ino, copied.Size, orig.Ino)
			}
			continue
		}
		refused = append(refused, i)
		if !strings.Contains(r.errOut, "limits.max_adoptions_per_user") || !strings.Contains(r.errOut, fmt.Sprintf("uid %d", uid)) {
			t.Errorf("adopting %s: exit %d: %s; want it refused naming the member and limits.max_adoptions_per_user", dirs[i], r.code, r.errOut)
		}
		if mounted(dirs[i]) {
			t.Errorf("%s is mounted after a refused adoption", dirs[i])
		}
		if exists(vol) {
			t.Errorf("a refused adoption left %s", vol)
		}
	}
	if len(refused) != 1 {
		t.Fatalf("%d of the member's %d adoptions refused, want 1 (limits.max_adoptions_per_user = 8)", len(refused), n)
	}
	last := refused[0]

	// Root is not bound by the member's count.
	if _, errOut, code := ctl(t, "", "project", "adopt", "bounds-by-root", dirs[last]); code != 0 {
		t.Errorf("root adopting the member's %s: exit %d: %s", dirs[last], code, errOut)
	}
	ctl(t, "", "project", "release", "bounds-by-root")
	// One released, the member adopts again.
	other := (last + 1) % n
	okAs(t, member, "project", "release", names[other])
	okAs(t, member, "project", "adopt", names[last], dirs[last])
	if !mounted(dirs[last]) {
		t.Errorf("%s is not mounted after its adoption", dirs[last])
	}
}

// TestHostileAdoptOwnProcRefused: a member's own process's directory in
// /proc is the member's (its owner is the process's uid), not a mount
// point, and root's up to /: an owned adoption of it would mount a
// volume of the member's files over /proc/PID, where root and every
// tool reads what the kernel says of the process (its Uid line, its
// descriptors, which the daemon's own in-use check reads). Until now
// only the root-owned entries of its net/ stopped the copy (a kernel
// that gave them to the process's owner, as it gives net/ itself, would
// not). Control: the directory is the member's, and the member cannot
// write its status. The adoption is refused, naming the filesystem;
// nothing is mounted, and /proc/PID/status still says the member's uid.
func TestHostileAdoptOwnProcRefused(t *testing.T) {
	tb := install(t)
	const member = "adopt-bounds"
	uid, _ := groupMember(t, member)
	reconfigure(t, "")
	sleeper := exec.Command("setpriv", "--reuid="+member, "--regid="+member, "--init-groups", "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	proc := fmt.Sprintf("/proc/%d", sleeper.Process.Pid)
	const name = "adopt-proc"
	t.Cleanup(func() { ctl(t, "", "project", "release", name) })
	// Control: the process runs as the member once setpriv has exec'd
	// sleep (its status says so), its directory is the member's, and
	// the member cannot write what the kernel says of it.
	uidLine := fmt.Sprintf("Uid:\t%d\t", uid)
	deadline := time.Now().Add(time.Minute)
	for {
		status, err := os.ReadFile(proc + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(status), uidLine) && strings.Contains(string(status), "Name:\tsleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member's sleep did not start: %s", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := uidOf(t, proc); got != uid {
		t.Fatalf("control: %s is uid %d's, not the member's (%d)", proc, got, uid)
	}
	if out := asMember(t, member, "printf 'Uid:\\t0\\t0\\t0\\t0\\n' > "+proc+"/status && echo FORGED"); strings.Contains(out, "FORGED") {
		t.Fatalf("control: the member writes %s/status outside any adoption", proc)
	}

	_, errOut, code := ctlAs(t, member, "project", "adopt", name, proc)
	if code == 0 {
		out := asMember(t, member, "printf 'Name:\\tsleep\\nUid:\\t0\\t0\\t0\\t0\\n' > "+proc+"/status && echo FORGED")
		status, _ := os.ReadFile(proc + "/status")
		t.Errorf("the member adopted %s (mounted %v); writing its status: %s; root reads there: %q", proc, mounted(proc), out, status)
	} else if !strings.Contains(errOut, "proc") || !strings.Contains(errOut, "holds no files") {
		t.Errorf("adopting %s: exit %d: %s; want it refused naming its filesystem", proc, code, errOut)
	}
	if mounted(proc) {
		t.Errorf("%s is a mount point after the adoption", proc)
	}
	if exists(filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", name)) {
		t.Errorf("the adoption of %s left its volume", proc)
	}
	if status, _ := os.ReadFile(proc + "/status"); !strings.Contains(string(status), uidLine) {
		t.Errorf("%s/status after the adoption: %q", proc, status)
	}
}

// TestHostileAdoptOwnDeepTreeBounded: once its directory is measured and
// its top listed, the member moves into it a chain of directories deeper
// than any path can name (made by relative names: no PATH_MAX bounds
// it). The copy holds two descriptors for each level it is in: 17,000
// levels take every descriptor the daemon may have (LimitNOFILE 32768),
// and every other call fails meanwhile. Control: the member makes the
// chain and moves it. The copy stops at 512 levels, named; nothing is
// mounted or left.
func TestHostileAdoptOwnDeepTreeBounded(t *testing.T) {
	tb := install(t)
	uid, gid := groupMember(t, hostileOwner)
	reconfigure(t, "")
	home := "/home/" + hostileOwner
	calc := calcProject(t, hostileOwner, uid, gid, home)
	const depth = 17000
	made := asMember(t, hostileOwner, fmt.Sprintf(`set -e
mkdir %[1]s/lib && echo lib > %[1]s/lib/f
cd %[2]s && python3 -c '
import os
os.mkdir("deep"); os.chdir("deep")
for i in range(%[3]d):
    os.mkdir("d"); os.chdir("d")
open("bottom", "w").write("bottom\n")
print("DEEP")
'`, calc, home, depth))
	if !strings.Contains(made, "DEEP") {
		t.Fatalf("control: the member cannot make its deep chain: %s", made)
	}
	const name = "hostile-deep"
	t.Cleanup(func() { ctl(t, "", "project", "release", name) })
	errOut, code := pausedAt(t, false, crashpoint.AdoptCopying, "mv "+home+"/deep "+calc+"/lib/deep && test -d "+calc+"/lib/deep/d/d", "project", "adopt", name, calc)
	if code == 0 || strings.Contains(errOut, "too many open files") || !strings.Contains(errOut, "more than 512 deep") {
		if len(errOut) > 600 { // each level named: 34,000 bytes of d/d/d
			errOut = errOut[:300] + " … " + errOut[len(errOut)-300:]
		}
		t.Errorf("adopting %s with a chain %d deep moved in: exit %d: %s; want it refused, named, before the daemon's descriptors run out", calc, depth, code, errOut)
	}
	if mounted(calc) {
		t.Errorf("%s is mounted after a refused adoption", calc)
	}
	if vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", name); exists(vol) {
		t.Errorf("a refused adoption left %s", vol)
	}
}

// TestHostileReleaseOwnDeepTreeKeepsFiles: in its adopted project the
// member makes a chain of directories deeper than a copy goes (600;
// TestHostileAdoptOwnDeepTreeBounded) and releases it. Control: the
// member makes the chain in its mounted project. The release is refused
// while the project is still mounted, its files where they were; once
// the member removes the chain, the release leaves a plain directory
// with its files. (A copy refused half way through the release, with
// the directory emptied and the project unmounted, left it stranded:
// every start of the daemon tried it again, and failed again.)
func TestHostileReleaseOwnDeepTreeKeepsFiles(t *testing.T) {
	install(t)
	const name = "hostile-release-deep"
	calc := ownCalcAdopted(t, name)
	made := asMember(t, hostileOwner, fmt.Sprintf(`set -e
cd %s && python3 -c '
import os
for i in range(600):
    os.mkdir("deep"); os.chdir("deep")
print("DEEP")
'`, calc))
	if !strings.Contains(made, "DEEP") || !mounted(calc) {
		t.Fatalf("control: the member cannot make its chain in its mounted project (mounted %v): %s", mounted(calc), made)
	}
	_, errOut, code := ctlAs(t, hostileOwner, "project", "release", name)
	if code == 0 || !strings.Contains(errOut, "more than 512 deep") {
		if len(errOut) > 600 {
			errOut = errOut[:300] + " … " + errOut[len(errOut)-300:]
		}
		t.Errorf("releasing %s with a chain 600 deep: exit %d: %s; want it refused, named", name, code, errOut)
	}
	if !mounted(calc) || !exists(filepath.Join(calc, "calc.py")) {
		t.Fatalf("after the refused release: %s mounted %v, calc.py there %v", calc, mounted(calc), exists(filepath.Join(calc, "calc.py")))
	}
	if out := asMember(t, hostileOwner, "rm -rf "+calc+"/deep && echo REMOVED"); !strings.Contains(out, "REMOVED") {
		t.Fatalf("the member removing its chain: %s", out)
	}
	okAs(t, hostileOwner, "project", "release", name)
	if mounted(calc) || !exists(filepath.Join(calc, "calc.py")) {
		t.Errorf("after the release: %s mounted %v, calc.py there %v", calc, mounted(calc), exists(filepath.Join(calc, "calc.py")))
	}
}

// TestHostileAdoptOwnMeasureFollowsNoSymlink: while the daemon measures
// the member's directory (its top listed), the member swaps a directory
// in it for a symlink to a root-only directory. Control: the member can
// make the swap, and the test sees the root-only directory opened when
// it is. The measure opens nothing there (a walk by name listed it as
// root, and took its size as the member's).
func TestHostileAdoptOwnMeasureFollowsNoSymlink(t *testing.T) {
	install(t)
	uid, gid := groupMember(t, hostileOwner)
	reconfigure(t, "")
	secret, _ := rootSecret(t)
	rootOnly := filepath.Dir(secret)
	home := "/home/" + hostileOwner
	calc := calcProject(t, hostileOwner, uid, gid, home)
	asMember(t, hostileOwner, "mkdir "+calc+"/lib && echo lib > "+calc+"/lib/f")
	if out := asMember(t, hostileOwner, fmt.Sprintf("cd %s && mv lib lib.real && ln -s %s lib && ls -d lib/ && rm lib && mv lib.real lib && echo SWAPPED", calc, rootOnly)); !strings.Contains(out, "SWAPPED") {
		t.Fatalf("control: the member cannot make the swap: %s", out)
	}
	watch, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(watch)
	if _, err := unix.InotifyAddWatch(watch, rootOnly, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	opened := func() int {
		buf := make([]byte, 64<<10)
		n, err := unix.Read(watch, buf)
		if err == unix.EAGAIN {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return n / unix.SizeofInotifyEvent
	}
	// Control: an open of the directory is seen.
	if _, err := os.ReadDir(rootOnly); err != nil {
		t.Fatal(err)
	}
	if opened() == 0 {
		t.Fatalf("control: the watch on %s did not see it opened", rootOnly)
	}
	const name = "hostile-measure"
	t.Cleanup(func() { ctl(t, "", "project", "release", name) })
	errOut, code := pausedAt(t, false, crashpoint.AdoptMeasuring, "cd "+calc+" && mv lib lib.real && ln -s "+rootOnly+" lib", "project", "adopt", name, calc)
	t.Logf("adopt with lib swapped for a symlink to %s while measured: exit %d: %s", rootOnly, code, errOut)
	if n := opened(); n > 0 {
		t.Errorf("%s (root-only) was opened %d times while the daemon measured the member's %s", rootOnly, n, calc)
	}
}
