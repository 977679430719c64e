package testbed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// InstallService puts sandboxd in this testbed as a sysadmin would, and
// starts it: config as /etc/sandboxd/sandboxd.toml, the repository's bus
// policy in /etc/dbus-1/system.d (with extra policy files, by name, for a
// test's own bus limits), and its unit in /run/systemd/system running
// bin. The testbed's root is a throw-away overlay: nothing of the machine
// changes. It returns once the daemon said READY=1 (Type=notify).
func InstallService(t testing.TB, repo, bin, config string, extraPolicies map[string]string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll("/etc/sandboxd", 0o755))
	must(os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(config), 0o644))
	policy, err := os.ReadFile(filepath.Join(repo, "packaging", "dbus", "org.sandboxd1.conf"))
	must(err)
	must(os.WriteFile("/etc/dbus-1/system.d/org.sandboxd1.conf", policy, 0o644))
	for name, text := range extraPolicies {
		must(os.WriteFile(filepath.Join("/etc/dbus-1/system.d", name), []byte(text), 0o644))
	}
	MustRun(t, "busctl", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")
	unit, err := os.ReadFile(filepath.Join(repo, "packaging", "systemd", "sandboxd.service"))
	must(err)
	unit = bytes.ReplaceAll(unit, []byte("ExecStart=/usr/bin/sandboxd"), []byte("ExecStart="+bin))
	must(os.WriteFile("/run/systemd/system/sandboxd.service", unit, 0o644))
	MustRun(t, "systemctl", "daemon-reload")
	MustRun(t, "systemctl", "start", "sandboxd.service")
}

// SandboxdConfig is the tests' sandboxd.toml for this testbed: its btrfs
// pool, project "web" at Btrfs.Project, and sandboxes in user namespaces
// over its root's layers (its root, an overlay, cannot be idmapped);
// extra (more sections, more projects) is appended.
func (info *Info) SandboxdConfig(extra string) string {
	layers, _ := json.Marshal(info.Layers)
	return fmt.Sprintf(`
[storage]
backend = "btrfs"
[storage.btrfs]
root = %q
[sandbox]
userns = "require"
root_layers = %s
[[project]]
name = "web"
path = %q
`, filepath.Join(info.Btrfs.Mount, "sandboxd"), layers, info.Btrfs.Project) + extra
}
