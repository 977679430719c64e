package testbed

import (
	"bytes"
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
