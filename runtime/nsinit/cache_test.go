package nsinit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// Without a user namespace (a zfs-fuse pool), the owner's cache is the
// host path the spec names, bound read-write at CachePath without set-id
// or device files.
func TestTheCacheIsBoundAtItsPath(t *testing.T) {
	cache := t.TempDir()
	w := start(t, func(s *nsinit.Spec) { s.Cache = cache })
	out, res := w.sh(t, 0, "echo kept > "+nsinit.CachePath+"/f && awk '$2 == \""+nsinit.CachePath+"\" { print $4 }' /proc/self/mounts")
	if res.How != nsinit.Exited || res.Code != 0 {
		t.Fatalf("writing in the cache: %v: %s", res, out)
	}
	opts := "," + strings.TrimSpace(out) + ","
	for _, want := range []string{"rw", "nosuid", "nodev"} {
		if !strings.Contains(opts, ","+want+",") {
			t.Errorf("the cache is mounted %q; want %s", out, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cache, "f")); err != nil || string(b) != "kept\n" {
		t.Errorf("the host's cache holds %q (%v); want the sandbox's write", b, err)
	}
	if ok, err := nsinit.CacheMounted(w.pid); err != nil || !ok {
		t.Errorf("CacheMounted = %v, %v; want true", ok, err)
	}
}

// A cache is a convenience: one that cannot be bound leaves the sandbox
// without one, built all the same; and none asked for, none mounted.
func TestACacheThatCannotBeBoundIsLeftOut(t *testing.T) {
	for _, cache := range []string{filepath.Join(t.TempDir(), "gone"), ""} {
		w := start(t, func(s *nsinit.Spec) { s.Cache = cache })
		if out, res := w.sh(t, 0, "true"); res.How != nsinit.Exited || res.Code != 0 {
			t.Errorf("a command in a sandbox whose cache is %q: %v: %s", cache, res, out)
		}
		if ok, err := nsinit.CacheMounted(w.pid); err != nil || ok {
			t.Errorf("cache %q: CacheMounted = %v, %v; want false", cache, ok, err)
		}
	}
}
