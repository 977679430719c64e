package units_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

// The capabilities say what the machine has: the cgroup layout from the
// mount table, systemd's version from systemctl.
func TestCapabilitiesDescribeThisMachine(t *testing.T) {
	m := connect(t)
	caps := m.Capabilities()

	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	layout := units.Legacy
	for _, line := range strings.Split(string(mounts), "\n") {
		// mount point is field 5; the filesystem type follows " - ".
		fields := strings.Fields(line)
		_, after, ok := strings.Cut(line, " - ")
		if !ok || len(fields) < 5 || !strings.HasPrefix(after, "cgroup2 ") {
			continue
		}
		switch fields[4] {
		case "/sys/fs/cgroup":
			layout = units.Unified
		case "/sys/fs/cgroup/unified":
			layout = units.Hybrid
		}
	}
	if caps.Layout != layout {
		t.Errorf("Capabilities.Layout = %s; the mount table says %s", caps.Layout, layout)
	}
	if layout != units.Unified && (caps.Freeze != units.FreezeSignals || caps.MemoryHigh || caps.MemorySwapMax) {
		t.Errorf("on a %s layout: %+v; want freezing by signals, no MemoryHigh, no MemorySwapMax", layout, caps)
	}

	out, err := exec.Command("systemctl", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 || fields[0] != "systemd" || fields[1] != strconv.Itoa(caps.SystemdVersion) {
		t.Errorf("Capabilities.SystemdVersion = %d; systemctl --version says %q", caps.SystemdVersion, strings.SplitN(string(out), "\n", 2)[0])
	}
	t.Logf("%+v", caps)
}
