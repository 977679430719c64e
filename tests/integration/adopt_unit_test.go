package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// mountUnitOf is the name systemd gives the mount unit of path p.
func mountUnitOf(t *testing.T, p string) string {
	t.Helper()
	return strings.TrimSpace(testbed.MustRun(t, "systemd-escape", "--path", "--suffix=mount", p))
}

// unitFileOf is where sandboxd writes the mount unit of p.
func unitFileOf(t *testing.T, p string) string {
	return filepath.Join("/etc/systemd/system", mountUnitOf(t, p))
}

// unitProp is systemctl show's value of property prop of unit u.
func unitProp(t *testing.T, u, prop string) string {
	t.Helper()
	return strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", prop, u))
}

// Root adopts a service account's data under root-only parents
// (/var/lib/SERVICE, as /var/lib/postgresql): the volume is bound back
// by an enabled mount unit in local-fs.target, so after a reboot the
// service, started before sandboxd, finds the project's files, not the
// ones under the mount as they were when adopted. Shown without a
// reboot: sandboxd stopped, the mount taken away, the unit started
// alone. A member's home directory (its owner can rename it) is still
// mounted by the daemon, with no unit; a release leaves no unit behind.
// Before, the service's data was mounted by the daemon alone: no unit,
// and the old files at its path until sandboxd started.
func TestAdoptedServiceDataIsMountedAtBootBeforeSandboxd(t *testing.T) {
	install(t)
	const member, service = "adopt-own", "adopt-svc"
	uid, gid := groupMember(t, member)
	svcUID := serviceAccount(t, service)
	reconfigure(t, "")
	data := "/var/lib/" + service + "-boot"
	os.RemoveAll(data)
	plainTree(t, data)
	t.Cleanup(func() { os.RemoveAll(data) })
	if err := os.Chown(data, int(svcUID), int(svcUID)); err != nil {
		t.Fatal(err)
	}
	unit, unitFile := mountUnitOf(t, data), unitFileOf(t, data)
	t.Cleanup(func() {
		testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
		ctl(t, "", "project", "release", "boot-svc")
	})
	if out := ok(t, "project", "adopt", "boot-svc", data); strings.Contains(out, "note:") {
		t.Errorf("the adoption of %s, bound back at boot, says: %s", data, out)
	}
	if !mounted(data) {
		t.Fatalf("%s is not a mount point after the adoption", data)
	}
	if !exists(unitFile) {
		t.Fatalf("no mount unit %s for %s: the service's data would be mounted only once sandboxd starts", unitFile, data)
	}
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-enabled", unit).Output()))); st != "enabled" {
		t.Errorf("%s is %q; want enabled", unit, st)
	}
	wanted := unitProp(t, unit, "WantedBy") + " " + unitProp(t, unit, "RequiredBy")
	if !strings.Contains(wanted, "local-fs.target") {
		t.Errorf("%s is wanted by %q; want local-fs.target (mounted at boot, before services)", unit, wanted)
	}
	// A write in the project after the adoption: only its volume has it.
	after := filepath.Join(data, "after-adoption.txt")
	if err := os.WriteFile(after, []byte("written in the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := describe(t, data)

	// As at boot: no sandboxd, no mount; the unit alone.
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", "sandboxd.service").Output()))); st == "active" {
		t.Fatalf("sandboxd is %s after its stop", st)
	}
	testbed.MustRun(t, "systemctl", "stop", unit)
	if mounted(data) || exists(after) {
		t.Fatalf("%s with its unit stopped: mounted %v, the project's write there %v; want the old directory", data, mounted(data), exists(after))
	}
	testbed.MustRun(t, "systemctl", "start", unit)
	if !mounted(data) || !exists(after) {
		t.Fatalf("%s once its unit alone started (sandboxd stopped): mounted %v, the project's write there %v; want the project's files", data, mounted(data), exists(after))
	}
	if got := describe(t, data); got != want {
		t.Errorf("%s as its unit mounted it:\n%s\nwant:\n%s", data, got, want)
	}
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")

	// A member's home: its owner can rename ~/calc, so no unit chases the
	// path; the daemon mounts it by descriptor.
	calc := calcProject(t, member, uid, gid, "/home/"+member)
	t.Cleanup(func() { ctl(t, "", "project", "release", "boot-home") })
	if out := ok(t, "project", "adopt", "boot-home", calc); !strings.Contains(out, "until sandboxd starts, "+calc+" shows its files as they were when adopted") {
		t.Errorf("the adoption of %s, mounted by sandboxd at its start, does not say what the path shows before: %s", calc, out)
	}
	if !mounted(calc) {
		t.Fatalf("%s is not a mount point after the adoption", calc)
	}
	if exists(unitFileOf(t, calc)) {
		t.Errorf("a mount unit for %s, a directory its owner can rename", calc)
	}
	ok(t, "project", "release", "boot-home")

	ok(t, "project", "release", "boot-svc")
	if exists(unitFile) {
		t.Errorf("the release left %s", unitFile)
	}
	if st := unitProp(t, unit, "LoadState"); st != "not-found" {
		t.Errorf("%s after the release: LoadState %s, want not-found", unit, st)
	}
	if mounted(data) {
		t.Errorf("%s is still a mount point after the release", data)
	}
	if got := describe(t, data); got != want {
		t.Errorf("%s after the release:\n%s\nwant:\n%s", data, got, want)
	}
}

// With the embedded pool (the default), which the daemon loop-mounts
// when it starts, after local-fs.target, the adopted volume's unit would
// find no source at boot: the pool's mount is made a unit of its own,
// enabled for boot, and the bind unit, started alone with the pool
// unmounted and sandboxd stopped, mounts the pool first and shows the
// project's files. Before, the bind unit failed there (its What= not
// there), and the service saw the old files.
func TestAdoptedDataOnTheEmbeddedPoolIsMountedAtBoot(t *testing.T) {
	tb := install(t)
	const service = "adopt-svc"
	svcUID := serviceAccount(t, service)
	dir := "/var/lib/sandboxd-embedded-test"
	image, mp := filepath.Join(dir, "pool.img"), filepath.Join(dir, "pool")
	poolUnit := mountUnitOf(t, mp)
	t.Cleanup(func() {
		exec.Command("systemctl", "disable", "--now", poolUnit).Run()
		os.Remove(filepath.Join("/etc/systemd/system", poolUnit))
		exec.Command("systemctl", "daemon-reload").Run()
		exec.Command("umount", mp).Run()
		os.RemoveAll(dir)
	})
	reconfigure(t, "") // and the tests' pool again after
	layers, _ := json.Marshal(tb.Layers)
	conf := fmt.Sprintf("[storage]\nbackend = \"embedded\"\n[storage.embedded]\nimage = %q\nsize = \"1GiB\"\nmountpoint = %q\n"+
		"[sandbox]\nuserns = \"require\"\nroot_layers = %s\n", image, mp, layers)
	if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	if !mounted(mp) {
		t.Fatalf("the embedded pool is not mounted at %s", mp)
	}
	data := "/var/lib/" + service + "-emb"
	os.RemoveAll(data)
	plainTree(t, data)
	t.Cleanup(func() { os.RemoveAll(data) })
	if err := os.Chown(data, int(svcUID), int(svcUID)); err != nil {
		t.Fatal(err)
	}
	unit := mountUnitOf(t, data)
	t.Cleanup(func() {
		testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
		ctl(t, "", "project", "release", "emb-svc")
	})
	ok(t, "project", "adopt", "emb-svc", data)
	after := filepath.Join(data, "after-adoption.txt")
	if err := os.WriteFile(after, []byte("written in the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-enabled", poolUnit).Output()))); st != "enabled" {
		t.Errorf("the pool's mount unit %s is %q; want enabled", poolUnit, st)
	}

	// As at boot: no sandboxd, no pool, no mount; the data's unit alone.
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	testbed.MustRun(t, "systemctl", "stop", unit)
	if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
		t.Fatalf("unmounting the pool, sandboxd stopped: %v %s", err, out)
	}
	if mounted(mp) || mounted(data) || exists(after) {
		t.Fatalf("as at boot: the pool mounted %v, %s mounted %v; want neither", mounted(mp), data, mounted(data))
	}
	if out, err := exec.Command("systemctl", "start", unit).CombinedOutput(); err != nil {
		journal, _ := exec.Command("journalctl", "--no-pager", "-n", "20", "-u", unit).CombinedOutput()
		t.Fatalf("starting %s alone (sandboxd stopped, the pool unmounted): %v %s\n%s", unit, err, out, journal)
	}
	if !mounted(mp) || !exists(after) {
		t.Fatalf("%s once its unit alone started: the pool mounted %v, the project's write there %v; want both", data, mounted(mp), exists(after))
	}
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
	ok(t, "project", "release", "emb-svc")
	if exists(unitFileOf(t, data)) || mounted(data) || !exists(after) {
		t.Errorf("after the release: unit file %v, mounted %v, the project's write there %v; want a plain directory with it", exists(unitFileOf(t, data)), mounted(data), exists(after))
	}
}
