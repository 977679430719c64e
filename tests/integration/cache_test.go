package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 21's caches kept across sandboxes, as a user meets them: what
// one sandbox put in $PIP_CACHE_DIR the next sandbox of the same owner
// finds, another owner's does not, and `sandboxctl cache clear` empties
// it. pip itself is not run: the testbed has no network to fill a real
// pip cache from, so the tests write where the variable points, as pip
// would.

// cacheVolume is the root of owner uid's cache on the host: with the
// default cache_quota on btrfs, the filesystem of its own mounted in its
// cachefs volume (issue 28's finding 6).
func cacheVolume(tb *testbed.Info, uid uint32) string {
	return filepath.Join(tb.Btrfs.Mount, "sandboxd", fmt.Sprintf("cachefs-u%d", uid), "fs")
}

// wantOwned checks that path is a directory of uid:gid, mode 0700.
func wantOwned(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("the cache volume: %v", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != uid || st.Gid != gid || st.Mode&0o7777 != 0o700 {
		t.Errorf("%s is mode %o, %d:%d; want a directory of %d:%d, mode 0700", path, st.Mode, st.Uid, st.Gid, uid, gid)
	}
}

// marker is what the script finds of the file a sandbox left in its
// PIP_CACHE_DIR: its text, or "absent".
const marker = `cat "$PIP_CACHE_DIR/marker" 2>/dev/null || echo absent`

func TestCacheIsKeptAcrossAnOwnersSandboxesAndNoOneElses(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	ctl(t, "", "cache", "clear") // root's, from an earlier test
	okAs(t, rootAgent, "cache", "clear")

	// Root's first sandbox: the variables, and a file in the cache.
	first := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", first) })
	env := inSandbox(t, first, `env | grep -E '^(PIP_CACHE_DIR|npm_config_cache|GOMODCACHE|GOCACHE|CARGO_HOME)=' | sort`)
	want := "CARGO_HOME=/var/cache/sandbox/cargo\nGOCACHE=/var/cache/sandbox/go/build\nGOMODCACHE=/var/cache/sandbox/go/mod\n" +
		"PIP_CACHE_DIR=/var/cache/sandbox/pip\nnpm_config_cache=/var/cache/sandbox/npm\n"
	if env != want {
		t.Errorf("a command's cache variables:\n%s\nwant\n%s", env, want)
	}
	inSandbox(t, first, `mkdir -p "$PIP_CACHE_DIR" && echo "root's" > "$PIP_CACHE_DIR/marker"`)
	wantOwned(t, cacheVolume(tb, 0), 0, 0)
	// Not the project's: a diff does not show it.
	if d := ok(t, "diff", first); strings.Contains(d, "marker") {
		t.Errorf("the sandbox's diff shows its cache:\n%s", d)
	}
	ok(t, "destroy", first)

	// Root's next sandbox finds it.
	second := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", second) })
	if got := inSandbox(t, second, marker); got != "root's\n" {
		t.Errorf("root's next sandbox finds %q in its cache; want what the destroyed one left", got)
	}

	// Another owner's sandbox does not, and has a cache of its own, on
	// disk the agent's, mode 0700.
	theirs := agentSandbox(t)
	out, errOut, code := agentSh(t, theirs, false, marker+`; mkdir -p "$PIP_CACHE_DIR" && echo "agent's" > "$PIP_CACHE_DIR/marker" && ls -A /var/cache/sandbox`)
	if code != 0 || out != "absent\npip\n" {
		t.Errorf("the agent's sandbox: exit %d, %q %s; want root's cache out of sight and its own written", code, out, errOut)
	}
	wantOwned(t, cacheVolume(tb, uid), uid, gid)
	// An owner's cache costs the pool what is in it, not a journal of
	// 64 MiB each (thirty owners' empty caches filled a 2 GiB pool).
	var img syscall.Stat_t
	if err := syscall.Stat(filepath.Join(filepath.Dir(cacheVolume(tb, uid)), "cache.img"), &img); err != nil {
		t.Fatalf("the agent's cache image: %v", err)
	} else if used := img.Blocks * 512; used > 16<<20 {
		t.Errorf("the agent's cache image, holding one small file, takes %d bytes of the pool; want under 16 MiB", used)
	}
	if got := inSandbox(t, second, marker); got != "root's\n" {
		t.Errorf("root's sandbox finds %q after the agent wrote its own; want root's", got)
	}
	// Root inside the agent's sandbox reaches the agent's cache, no more.
	if out, errOut, code := agentSh(t, theirs, true, marker); code != 0 || out != "agent's\n" {
		t.Errorf("root in the agent's sandbox: exit %d, %q %s; want the agent's cache", code, out, errOut)
	}
	ctl(t, "", "destroy", theirs)
	next := agentSandbox(t)
	if out, errOut, code := agentSh(t, next, false, marker); code != 0 || out != "agent's\n" {
		t.Errorf("the agent's next sandbox: exit %d, %q %s; want what its first left", code, out, errOut)
	}

	// Clear, with a sandbox of the agent's running (emptied in place).
	okAs(t, rootAgent, "cache", "clear")
	if out, errOut, code := agentSh(t, next, false, `ls -A /var/cache/sandbox; echo end`); code != 0 || out != "end\n" {
		t.Errorf("the agent's cache after a clear: exit %d, %q %s; want it empty", code, out, errOut)
	}
	wantOwned(t, cacheVolume(tb, uid), uid, gid)
	if got := inSandbox(t, second, marker); got != "root's\n" {
		t.Errorf("root's cache after the agent cleared its own: %q; want it kept", got)
	}

	// Clear, with no sandbox of root's (the volume is made anew).
	ok(t, "destroy", second)
	ok(t, "cache", "clear")
	wantOwned(t, cacheVolume(tb, 0), 0, 0)
	third := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", third) })
	if got := inSandbox(t, third, marker+`; ls -A /var/cache/sandbox; echo end`); got != "absent\nend\n" {
		t.Errorf("root's sandbox after a clear finds %q; want an empty cache", got)
	}
}

// A sandbox plants symlinks to the host's files in its cache; the daemon,
// root on the host, clears the cache and leaves the host's files be.
func TestCacheClearFollowsNoSymlinkASandboxPlanted(t *testing.T) {
	_, _, _ = rootInsideSetup(t)
	victims := t.TempDir()
	file := filepath.Join(victims, "file")
	dir := filepath.Join(victims, "dir")
	if err := os.WriteFile(file, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inner"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := agentSandbox(t)
	script := fmt.Sprintf(`cd /var/cache/sandbox && ln -s %[1]s file && ln -s %[2]s dir && mkdir -p deep/er &&
ln -s %[2]s deep/er/dir && ln -s %[1]s deep/file && ln -s / root && ls -A`, file, dir)
	if out, errOut, code := agentSh(t, id, false, script); code != 0 || out != "deep\ndir\nfile\nroot\n" {
		t.Fatalf("planting symlinks: exit %d, %q %s", code, out, errOut)
	}
	okAs(t, rootAgent, "cache", "clear")
	for _, p := range []string{file, filepath.Join(dir, "inner")} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "host\n" {
			t.Errorf("the host's %s after the cache was cleared: %q, %v", p, b, err)
		}
	}
	if out, errOut, code := agentSh(t, id, false, `ls -A /var/cache/sandbox; echo end`); code != 0 || out != "end\n" {
		t.Errorf("the cache after a clear: exit %d, %q %s; want it empty", code, out, errOut)
	}
}

// The quota bounds what all of one owner's sandboxes put in the cache
// together.
func TestCacheQuotaBoundsAllOfAnOwnersSandboxes(t *testing.T) {
	install(t)
	// Cleared again once the sandboxes are gone and the configuration is
	// back (cleanups run last first): a cache filesystem keeps its size
	// until it is cleared with no sandbox of its owner's, and root's next
	// sandboxes (a go session's build cache) want the default's room, not
	// 24 MiB.
	t.Cleanup(func() { ctl(t, "", "cache", "clear") })
	reconfigure(t, "[limits]\ncache_quota = \"24MiB\"\n")
	ctl(t, "", "cache", "clear")
	var ids []string
	for range 2 {
		id := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
		t.Cleanup(func() { ctl(t, "", "destroy", id) })
		ids = append(ids, id)
	}
	write := `dd if=/dev/urandom of=/var/cache/sandbox/%s bs=1M count=16 conv=fsync 2>&1 >/dev/null && echo written || echo refused`
	if got := inSandbox(t, ids[0], fmt.Sprintf(write, "one")); !strings.HasSuffix(got, "written\n") {
		t.Fatalf("16 MiB into a 24 MiB cache: %q", got)
	}
	got := inSandbox(t, ids[1], fmt.Sprintf(write, "two"))
	// The cache's own filesystem is full (ENOSPC), or a volume's quota
	// refuses (EDQUOT).
	if !strings.HasSuffix(got, "refused\n") || !strings.Contains(got, "quota") && !strings.Contains(got, "No space left") {
		t.Errorf("16 MiB more from another sandbox of the same owner: %q; want the quota to refuse it", got)
	}
}
