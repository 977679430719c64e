package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 29, "Owners kept inside": a project's copy in a sandbox shows
// every file with its real owner (the sandbox's whole id map over the
// project's volume), so root inside changes any file of its copy, a
// service inside runs as its own account on its own files, and the
// sandbox's owner writes its project's top directory; promotion writes
// back with those owners, and a promoter other than root gives the
// host's files to no one but itself. The host root's layers stay shown
// through the narrow map.

// wwwData is Debian's www-data, uid and gid.
const wwwData = 33

// Root inside changes a www-data page of an adopted site, which is
// www-data's inside; promoted, the page on the host has the new content
// and is still www-data's, mode 640.
func TestOwnersKeptAWwwDataPageOfAnAdoptedSiteStaysItsOwn(t *testing.T) {
	install(t)
	name := "site-" + suffix()
	dir := "/srv/" + name
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "index.html")
	if err := os.WriteFile(page, []byte("<h1>v1</h1>\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(page, wwwData, wwwData); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl(t, "", "project", "release", name); os.RemoveAll(dir) })
	ok(t, "project", "adopt", name, dir)
	id := strings.TrimSpace(ok(t, "create", "--quiet", name))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })

	if out := ok(t, "exec", id, "--", "stat", "-c", "%U:%G %a", "index.html"); out != "www-data:www-data 640\n" {
		t.Errorf("index.html inside: %q; want www-data:www-data 640", out)
	}
	if out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "sh", "-c", "echo '<h1>v2</h1>' > index.html && cat index.html"); code != 0 || out != "<h1>v2</h1>\n" {
		t.Fatalf("root inside writing www-data's index.html: exit %d: %s%s", code, out, errOut)
	}
	if data, _ := os.ReadFile(page); string(data) != "<h1>v1</h1>\n" {
		t.Fatalf("the host's page changed before the promotion: %q", data)
	}
	ok(t, "promote", id)
	if data, _ := os.ReadFile(page); string(data) != "<h1>v2</h1>\n" {
		t.Errorf("the host's page after the promotion: %q; want <h1>v2</h1>", data)
	}
	if u, g, m := ownerOf(t, page); u != wwwData || g != wwwData || m != 0o640 {
		t.Errorf("the host's page after the promotion: %d:%d mode %o; want %d:%d 640", u, g, m, wwwData, wwwData)
	}
}

// A service account inside runs on its own files: www-data (setpriv from
// root inside) appends to a www-data file of the project, 0640, which it
// owns there as on the host.
func TestOwnersKeptAServiceInsideRunsOnItsOwnFiles(t *testing.T) {
	tb := install(t)
	name := "owners-svc-" + suffix()
	webFile(t, tb, name, []byte("v1\n"), wwwData, wwwData, 0o640)
	id := sandbox(t)

	script := fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups sh -c 'id -un; echo by-www-data >> %s; stat -c %%U:%%G:%%a %s; cat %s'",
		wwwData, wwwData, name, name, name)
	out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "sh", "-c", script)
	if want := "www-data\nwww-data:www-data:640\nv1\nby-www-data\n"; code != 0 || out != want {
		t.Errorf("www-data inside on its own file: exit %d: %q %s; want %q", code, out, errOut, want)
	}
}

// The sandbox's owner writes its project's top directory: web's is
// root's, and the agent (a user of web, without --root) touches a file
// there and edits its own file with sed -i (which renames a new file
// over it). The diff names no change of the top directory; after the
// promotion the host's top directory keeps its owner and mode, and the
// agent's files are the agent's.
func TestOwnersKeptTheOwnerWritesItsProjectsTopDirectory(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	top := tb.Btrfs.Project
	tu, tg, tm := ownerOf(t, top)
	if tu == uid {
		t.Fatalf("the control: web's top directory is the agent's (%d); want another's", tu)
	}
	mine, made := "owners-mine-"+suffix(), "owners-touched-"+suffix()
	host := webFile(t, tb, mine, []byte("version = 1\n"), uid, gid, 0o644)
	t.Cleanup(func() { os.Remove(filepath.Join(top, made)) })
	id := agentSandbox(t)

	agentShOK(t, id, false, "touch "+made+" && sed -i s/1/2/ "+mine+" && mkdir -p __pycache__ && rmdir __pycache__")
	if out := agentShOK(t, id, false, "cat "+mine+"; stat -c %u "+mine+" "+made); out != fmt.Sprintf("version = 2\n%d\n%d\n", uid, uid) {
		t.Errorf("inside after touch and sed -i: %q", out)
	}
	diff := okAs(t, rootAgent, "diff", id)
	for _, l := range strings.Split(strings.TrimSpace(diff), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[len(f)-1] == "." || f[len(f)-1] == "./") {
			t.Errorf("the diff names the top directory: %q\n%s", l, diff)
		}
	}
	if !strings.Contains(diff, made) || !strings.Contains(diff, mine) {
		t.Errorf("the diff lacks %s or %s:\n%s", made, mine, diff)
	}
	okAs(t, rootAgent, "promote", id)
	if u, g, m := ownerOf(t, top); u != tu || g != tg || m != tm {
		t.Errorf("the host's top directory after the promotion: %d:%d mode %o; want %d:%d %o", u, g, m, tu, tg, tm)
	}
	if data, _ := os.ReadFile(host); string(data) != "version = 2\n" {
		t.Errorf("the host's %s after the promotion: %q", mine, data)
	}
	for _, p := range []string{host, filepath.Join(top, made)} {
		if u, _, _ := ownerOf(t, p); u != uid {
			t.Errorf("the host's %s after the promotion: uid %d; want the agent's, %d", p, u, uid)
		}
	}
}

// A promoter other than root gives the host's files to no one but
// itself: root in its sandbox may give its copy's files to www-data, to
// root or to another user (the control: it does, inside), but the
// agent's promotion of that is refused, naming each path, and the host's
// files keep their owners. What keeps its owner promotes.
func TestOwnersKeptAPromoterGivesFilesToNoOneButItself(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	toWeb, toRoot, newOther := "owners-to-web-"+suffix(), "owners-to-root-"+suffix(), "owners-new-other-"+suffix()
	webHost := webFile(t, tb, toWeb, []byte("mine\n"), uid, gid, 0o644)
	rootHost := webFile(t, tb, toRoot, []byte("mine\n"), uid, gid, 0o644)
	t.Cleanup(func() { os.Remove(filepath.Join(tb.Btrfs.Project, newOther)) })
	id := agentSandbox(t)

	// Given to www-data and to another user (no root in it: the check of
	// what is given to root alone let this through).
	got := agentShOK(t, id, true, fmt.Sprintf("chown %d:%d %s && echo x > %s && chown 4321:4321 %s && stat -c %%u:%%g %s %s",
		wwwData, wwwData, toWeb, newOther, newOther, toWeb, newOther))
	if got != "33:33\n4321:4321\n" {
		t.Fatalf("the control: root inside giving files away: %q; want 33:33, 4321:4321", got)
	}
	refused := func(wants ...string) {
		t.Helper()
		out, errOut, code := ctlAs(t, rootAgent, "promote", id)
		if code != 4 {
			t.Errorf("the agent's promotion of files given away: exit %d: %s%s; want 4", code, out, errOut)
		}
		for _, want := range append(wants, "not the promoter's", "--allow-privileged") {
			if !strings.Contains(errOut, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, errOut)
			}
		}
		for _, p := range []string{webHost, rootHost} {
			if u, g, _ := ownerOf(t, p); u != uid || g != gid {
				t.Errorf("the host's %s after the refused promotion: %d:%d; want the agent's %d:%d", p, u, g, uid, gid)
			}
		}
		if _, err := os.Lstat(filepath.Join(tb.Btrfs.Project, newOther)); !os.IsNotExist(err) {
			t.Errorf("the host has %s after the refused promotion (%v)", newOther, err)
		}
	}
	refused(toWeb+" (given to uid 33 (was uid "+fmt.Sprint(uid)+")", newOther+" (new, owned by uid 4321")
	// And to root too: all three are named.
	agentShOK(t, id, true, "chown 0:0 "+toRoot)
	refused(toWeb+" (given to uid 33", newOther+" (new, owned by uid 4321", toRoot+" (given to root (was uid "+fmt.Sprint(uid)+")")

	// Given back to the agent, the same change set promotes.
	agentShOK(t, id, true, fmt.Sprintf("chown %d:%d %s %s && rm %s", uid, gid, toWeb, toRoot, newOther))
	if out, errOut, code := ctlAs(t, rootAgent, "promote", id); code != 0 && !strings.Contains(errOut, "nothing") {
		t.Errorf("the agent's promotion of its own files: exit %d: %s%s", code, out, errOut)
	}
}

// The host root's layers stay narrow: a file of another user's and one
// of a system account's on the host root (not in the project), 0600, are
// nobody's inside, and root inside can neither read nor write them,
// while the same owners' files in the project are their own.
func TestOwnersKeptTheHostRootStaysNarrow(t *testing.T) {
	tb := install(t)
	dir := "/opt/owners-" + suffix()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, owner := range []int{4321, 123} {
		p := filepath.Join(dir, fmt.Sprint(owner))
		if err := os.WriteFile(p, []byte("private\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
		// The control: root outside reads it, by CAP_DAC_OVERRIDE alone.
		if out := testbed.MustRun(t, "cat", p); out != "private\n" {
			t.Fatalf("the control: root outside read %q", out)
		}
	}
	inProject := "owners-theirs-" + suffix()
	webFile(t, tb, inProject, []byte("in the project\n"), 4321, 4321, 0o600)
	id := sandbox(t)

	for _, owner := range []int{4321, 123} {
		p := filepath.Join(dir, fmt.Sprint(owner))
		if out := ok(t, "exec", id, "--", "stat", "-c", "%u:%g", p); out != "65534:65534\n" {
			t.Errorf("the host root's %s inside: owner %q; want 65534:65534 (nobody)", p, out)
		}
		if out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "cat", p); code == 0 || strings.Contains(out, "private") || !strings.Contains(errOut, "Permission denied") {
			t.Errorf("root inside read the host root's %s: exit %d, %q, %q", p, code, out, errOut)
		}
		if _, errOut, code := ctl(t, "", "exec", "--root", id, "--", "sh", "-c", "echo x >> "+p); code == 0 {
			t.Errorf("root inside wrote the host root's %s: %s", p, errOut)
		}
	}
	if out := ok(t, "exec", "--root", id, "--", "sh", "-c", "stat -c %u:%g "+inProject+"; cat "+inProject); out != "4321:4321\nin the project\n" {
		t.Errorf("the project's file of uid 4321 inside, as root: %q; want its own owner and root reading it", out)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "4321"), &st); err != nil || st.Uid != 4321 {
		t.Errorf("the host root's file after the sandbox: %+v, %v", st.Uid, err)
	}
}

// Every path of a project adopted as several keeps its owners: a
// service's 0600 file in a 0700 directory of its own (uid 101, as
// Debian's postgres), in the second path, is its own inside; the service
// (setpriv from root inside) appends to it; promoted, it is still the
// service's on the host, mode 600.
func TestOwnersKeptInEveryPathOfAProjectOfSeveral(t *testing.T) {
	install(t)
	const svc = 101
	name := "owners-multi-" + suffix()
	app, data := "/srv/"+name+"-app", "/srv/"+name+"-data"
	cluster := filepath.Join(data, "main")
	for _, d := range []string{app, cluster} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { ctl(t, "", "project", "release", name); os.RemoveAll(app); os.RemoveAll(data) })
	if err := os.WriteFile(filepath.Join(app, "app.conf"), []byte("port = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(cluster, "table")
	if err := os.WriteFile(table, []byte("row 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{cluster, table} {
		if err := os.Chown(p, svc, svc); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(cluster, 0o700); err != nil {
		t.Fatal(err)
	}
	ok(t, "project", "adopt", name, app, data)
	id := strings.TrimSpace(ok(t, "create", "--quiet", name))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })

	script := fmt.Sprintf("stat -c %%u:%%g:%%a %s %s && setpriv --reuid=%d --regid=%d --clear-groups sh -c 'echo row 2 >> %s' && cat %s",
		cluster, table, svc, svc, table, table)
	out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "sh", "-c", script)
	if want := "101:101:700\n101:101:600\nrow 1\nrow 2\n"; code != 0 || out != want {
		t.Fatalf("the service's file inside: exit %d: %q %s; want %q", code, out, errOut, want)
	}
	ok(t, "promote", id)
	if data, _ := os.ReadFile(table); string(data) != "row 1\nrow 2\n" {
		t.Errorf("the host's %s after the promotion: %q", table, data)
	}
	if u, g, m := ownerOf(t, table); u != svc || g != svc || m != 0o600 {
		t.Errorf("the host's %s after the promotion: %d:%d mode %o; want %d:%d 600", table, u, g, m, svc, svc)
	}
}
