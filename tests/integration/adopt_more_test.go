package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 18's several directories per project: an app and its data,
// adopted together where they live, written by a host service that is
// frozen while sandboxes' bases are snapshotted; sandboxes see each at
// its own path, and a diff and a promotion cover both.
func TestAdoptAnAppAndItsDataAsOneProject(t *testing.T) {
	install(t)
	const app, data, name, writer = "/srv/mv-app", "/srv/mv-data", "mv-app", "mv-writer.service"
	for _, d := range []string{app, data, app + "/sub"} {
		os.RemoveAll(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(app, "index.html"), []byte("app v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "seed"), []byte("rows\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The host's service: a counter written to the data, then the app,
	// each file replaced whole (as a database's own writes are whole): a
	// snapshot of one point of it has the data's count equal to the
	// app's, or one ahead.
	testbed.MustRun(t, "systemd-run", "--unit="+writer, "sh", "-c",
		`i=0; while :; do i=$((i+1)); for d in `+data+` `+app+`; do echo $i > $d/.n; mv $d/.n $d/n; done; done`)
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", writer).Run()
		ctl(t, "", "project", "release", name)
		os.RemoveAll(app)
		os.RemoveAll(data)
	})

	fails(t, 2, "one inside the other", "project", "adopt", "mv-nested", app, app+"/sub")
	fails(t, 2, "does not end in", "project", "adopt", "--freeze", "mv-writer", "mv-bad", app, data)
	// Frozen, the bus or the daemon itself could never thaw it.
	for _, unit := range []string{"dbus.service", "sandboxd.service", "systemd-journald.service"} {
		fails(t, 2, "cannot be frozen or stopped by sandboxd", "project", "adopt", "--freeze", unit, "mv-bad", app, data)
	}
	many := []string{"project", "adopt"}
	for i := range 17 {
		many = append(many, "--freeze", fmt.Sprintf("mv-%d.service", i))
	}
	fails(t, 2, "at most 16", append(many, "mv-bad", app, data)...)
	ok(t, "project", "adopt", "--restart-units", "--freeze", writer, name, app, data)
	for _, d := range []string{app, data} {
		if out, err := exec.Command("findmnt", "-n", d).CombinedOutput(); err != nil || len(out) == 0 {
			t.Errorf("%s is not mounted back after the adoption: %v %s", d, err, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(app, "index.html")); err != nil || string(b) != "app v1\n" {
		t.Errorf("the host's view of %s after the adoption: %q, %v", app, b, err)
	}
	// counter reads the writer's count (a read may find the file just
	// truncated: read again); writing says whether it goes up, waiting
	// for that up to a minute (a loaded machine may leave the restarted
	// writer unscheduled for seconds; a frozen or stopped one never
	// writes).
	counter := func(p string) int {
		for range 100 {
			b, _ := os.ReadFile(p)
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
			time.Sleep(time.Millisecond)
		}
		return -1
	}
	writing := func() bool {
		before := counter(filepath.Join(data, "n"))
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if counter(filepath.Join(data, "n")) > before {
				return true
			}
		}
		return false
	}
	if !writing() {
		t.Fatal("the writer does not write after the adoption: the test below would prove nothing")
	}

	id := strings.TrimSpace(ok(t, "create", "--quiet", name))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	out := ok(t, "exec", "--root", id, "--", "sh", "-c", "pwd; cat "+app+"/index.html "+data+"/seed; cat "+data+"/n "+app+"/n")
	lines := strings.Fields(out)
	if len(lines) != 6 || lines[0] != app || lines[1] != "app" || lines[3] != "rows" {
		t.Fatalf("the sandbox's view of the project: %q", out)
	}
	dn, _ := strconv.Atoi(lines[4])
	an, _ := strconv.Atoi(lines[5])
	if dn-an != 0 && dn-an != 1 {
		t.Errorf("the sandbox's copy has the data at %d and the app at %d: not one point of the writer's", dn, an)
	}
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service")
	if !strings.Contains(journal, "froze the services that write the project") || !strings.Contains(journal, writer) {
		t.Errorf("the journal says nothing of %s frozen for the snapshot", writer)
	}
	if !writing() {
		t.Error("the writer was left frozen after the create")
	}

	ok(t, "exec", "--root", id, "--", "sh", "-c", "echo 'app v2' > "+app+"/index.html && echo more > "+data+"/added && rm "+app+"/n "+data+"/n")
	diff := ok(t, "diff", id)
	for _, want := range []string{"srv/mv-app/index.html", "srv/mv-data/added"} {
		if !strings.Contains(diff, want) {
			t.Errorf("the diff has no %s:\n%s", want, diff)
		}
	}
	_ = exec.Command("systemctl", "stop", writer).Run()
	ok(t, "promote", "--force", id)
	for p, want := range map[string]string{app + "/index.html": "app v2\n", data + "/added": "more\n"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("the host's %s after the promotion: %q, %v; want %q", p, b, err, want)
		}
	}

	ok(t, "destroy", id)
	ok(t, "project", "release", name)
	for p, want := range map[string]string{app + "/index.html": "app v2\n", data + "/added": "more\n", data + "/seed": "rows\n"} {
		if out, _ := exec.Command("findmnt", "-n", filepath.Dir(p)).CombinedOutput(); len(out) > 0 {
			t.Errorf("%s is still a mount point after the release: %s", filepath.Dir(p), out)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("after the release, the host's %s: %q, %v; want %q", p, b, err, want)
		}
	}
}
