package testbed_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A test asks for the host's reboot and runs again after it: what it wrote
// on the btrfs and the zfs pool is there, what ran is gone, /run is empty.
func TestRebootTestKeepsThePoolsAndEndsWhatRan(t *testing.T) {
	tb := testbed.Require(t)
	files := map[string]string{
		filepath.Join(tb.Btrfs.Project, "reboot-kept.txt"):  "on btrfs\n",
		filepath.Join(tb.ZFS.Mountpoint, "reboot-kept.txt"): "on zfs\n",
	}
	const unit = "testbed-reboot-sleep.service"
	var before struct{ Boot string }
	if !testbed.Rebooted(t, &before) {
		for path, text := range files {
			writeSynced(t, path, text)
		}
		// On zfs-fuse an fsync alone was seen lost when it was killed
		// (its intent log is not replayed at import): a snapshot commits
		// the transaction group.
		testbed.MustRun(t, "zfs", "snapshot", tb.ZFS.Project+"@reboot-test")
		testbed.MustRun(t, "systemd-run", "--quiet", "--unit="+unit, "sleep", "infinity")
		if err := os.WriteFile("/run/testbed-reboot-gone", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		before.Boot = bootID(t)
		testbed.RebootTest(t, before)
	}
	t.Cleanup(func() {
		for path := range files {
			os.Remove(path)
		}
		_ = exec.Command("zfs", "destroy", tb.ZFS.Project+"@reboot-test").Run()
	})
	if now := bootID(t); now == before.Boot {
		t.Fatalf("after RebootTest, the testbed's systemd is the one before (%s)", now)
	}
	for path, text := range files {
		if data, err := os.ReadFile(path); err != nil || string(data) != text {
			t.Errorf("%s after the reboot: %q, %v; want %q", path, data, err, text)
		}
	}
	if _, err := os.Stat("/run/testbed-reboot-gone"); !os.IsNotExist(err) {
		t.Errorf("/run after the reboot still holds what was written before (%v)", err)
	}
	out, _ := exec.Command("systemctl", "is-active", unit).Output()
	if state := strings.TrimSpace(string(out)); state != "inactive" {
		t.Errorf("%s, started before the reboot, is %q after it; want inactive", unit, state)
	}
}

// bootID tells one boot of the testbed from the next: the start time of
// its PID 1 (the testbed shares the host's kernel, so /proc's boot_id is
// the host's).
func bootID(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/1/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		t.Fatalf("/proc/1/stat: %q", s)
	}
	return f[19]
}

// writeSynced writes a file and fsyncs it: a power cut loses what a
// filesystem holds in memory.
func writeSynced(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
