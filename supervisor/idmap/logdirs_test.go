package idmap

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// A booted sandbox is given the log directories a package installed, as
// dpkg's lists name them, and not the others of the host's /var/log: a
// directory an admin made there keeps its name to itself.
func TestBootedSandboxesGetThePackagedLogDirsOnly(t *testing.T) {
	root := t.TempDir()
	logs, lists := filepath.Join(root, "log"), filepath.Join(root, "info")
	for _, d := range []string{"nginx", "nginx/sub", "secretname", "secretname/inner", "runit/ssh"} {
		if err := os.MkdirAll(filepath.Join(logs, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(lists, 0o755); err != nil {
		t.Fatal(err)
	}
	list := "/etc\n" + logs + "\n" + logs + "/nginx\n" + logs + "/runit\n" + logs + "/runit/ssh\n" + logs + "/../escape\n"
	if err := os.WriteFile(filepath.Join(lists, "nginx-common.list"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := &nsinit.IDMap{UIDs: []nsinit.Extent{{Inside: 0, Host: 0, Count: 65536}}, GIDs: []nsinit.Extent{{Inside: 0, Host: 0, Count: 65536}}}
	var got []string
	for _, d := range logDirs(logs, packagedUnder(lists, logs), ids) {
		got = append(got, d.Path)
		if d.Mode != 0o750 {
			t.Errorf("%s: mode %04o; want the host's 0750", d.Path, d.Mode)
		}
	}
	want := []string{logs + "/nginx", logs + "/runit", logs + "/runit/ssh"}
	if !slices.Equal(got, want) {
		t.Errorf("log dirs given: %q; want %q (the packaged ones only)", got, want)
	}
	// Without dpkg's lists (another distribution's host), none: a
	// service's LogsDirectory= is made by the sandbox's systemd.
	if d := logDirs(logs, packagedUnder(filepath.Join(root, "none"), logs), ids); len(d) != 0 {
		t.Errorf("log dirs given without dpkg: %v; want none", d)
	}
}
