package idmap

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// A directory the sandbox could not read (a service's 0700 state) is
// named, after its parents, to be made empty and opaque; one it reads is
// not. Owners the sandbox's namespace lacks are nobody's.
func TestStateDirsNameTheUnreadableOnesAfterTheirParents(t *testing.T) {
	root := t.TempDir()
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"svc", 0o755}, {"svc/private", 0o700}, {"svc/private/inner", 0o700}, {"open", 0o755}, {"open/sub", 0o755}} {
		p := filepath.Join(root, d.path)
		if err := os.Mkdir(p, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	none := &nsinit.IDMap{} // the files' owner is no one the sandbox is shown
	dirs := stateDirs([]string{root}, none, none)
	if len(dirs) == 0 {
		t.Fatal("no state directories; want svc/private")
	}
	last := dirs[len(dirs)-1]
	if last.Path != filepath.Join(root, "svc/private") || !last.Opaque || last.Mode != 0o700 {
		t.Errorf("last directory %+v; want svc/private, opaque, mode 0700", last)
	}
	if last.UID != nobodyID || last.GID != nobodyID {
		t.Errorf("svc/private is %d:%d; want nobody's (its owner has no id in the namespace)", last.UID, last.GID)
	}
	seen := map[string]bool{}
	for i, d := range dirs {
		if !seen[filepath.Dir(d.Path)] && filepath.Dir(d.Path) != "/" && i > 0 {
			t.Errorf("%s comes before its parent", d.Path)
		}
		seen[d.Path] = true
		if d.Opaque && d.Path != last.Path {
			t.Errorf("%s is opaque; only the unreadable one is", d.Path)
		}
		for _, p := range []string{"open", "open/sub", "svc/private/inner"} {
			if d.Path == filepath.Join(root, p) {
				t.Errorf("%s named: a directory the sandbox reads, or one below the unreadable", p)
			}
		}
	}
	if !seen[filepath.Join(root, "svc")] {
		t.Error("svc, the parent, is not named before svc/private")
	}
	// Shown its owner, the sandbox reads it: nothing to make.
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	own := &nsinit.IDMap{UIDs: []nsinit.Extent{{Inside: uid, Host: uid, Count: 1}}, GIDs: []nsinit.Extent{{Inside: gid, Host: gid, Count: 1}}}
	if got := stateDirs([]string{root}, own, own); len(got) != 0 {
		t.Errorf("state directories of a sandbox shown their owner: %v; want none", got)
	}
}

func TestStateDirCacheGivesNoneWithoutAUserNamespace(t *testing.T) {
	var c StateDirCache
	if got := c.Of(state.Record{Owner: 1001}); got != nil {
		t.Errorf("state directories of a sandbox without ids: %v; want none", got)
	}
}
