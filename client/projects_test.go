package client_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// An administrator (root here) registers a subvolume as a project,
// naming who may use it, makes a sandbox of it, and removes it once
// that is gone: its files stay.
func TestAProjectAddedTakesSandboxesAndIsRemovedWithItsFilesKept(t *testing.T) {
	ctx := context.Background()
	tb := testbed.Require(t)
	path := filepath.Join(tb.Btrfs.Mount, "client-api")
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	if err := os.WriteFile(filepath.Join(path, "index.html"), []byte("<h1>api</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := connect(t)
	if err := c.AddProject(ctx, "client-api", path, client.ProjectOptions{Users: []string{"root"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RemoveProject(context.Background(), "client-api") })
	if err := c.AddProject(ctx, "client-api", path, client.ProjectOptions{}); !errors.Is(err, client.ErrExists) {
		t.Errorf("AddProject of a name taken: %v (%s); want ErrExists", err, errorName(err))
	}
	projects, err := c.Projects(ctx)
	want := sandboxd1.ProjectEntry{Name: "client-api", Location: path, Origin: "added"}
	if err != nil || !slices.Contains(projects, want) {
		t.Fatalf("Projects after AddProject: %+v, %v; want %+v among them", projects, err, want)
	}

	sb, err := c.Create(ctx, "client-api", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := sb.ReadFile(ctx, "index.html", client.ReadOptions{}); err != nil || string(data) != "<h1>api</h1>\n" {
		t.Errorf("index.html in a sandbox of the added project: %q, %v", data, err)
	}
	if err := c.RemoveProject(ctx, "client-api"); !errors.Is(err, client.ErrWrongState) {
		t.Errorf("RemoveProject with a sandbox of it: %v (%s); want ErrWrongState", err, errorName(err))
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveProject(ctx, "web"); !errors.Is(err, client.ErrInvalidArgs) {
		t.Errorf("RemoveProject of sandboxd.toml's project: %v (%s); want ErrInvalidArgs", err, errorName(err))
	}
	if err := c.RemoveProject(ctx, "client-api"); err != nil {
		t.Fatal(err)
	}
	if projects, err := c.Projects(ctx); err != nil || slices.ContainsFunc(projects, func(p sandboxd1.ProjectEntry) bool { return p.Name == "client-api" }) {
		t.Errorf("Projects after RemoveProject: %+v, %v; want client-api gone", projects, err)
	}
	if _, err := os.Stat(filepath.Join(path, "index.html")); err != nil {
		t.Errorf("the removed project's files: %v", err)
	}
}

// What one sandbox left in the caller's cache, the next one finds until
// ClearCache.
func TestClearCacheEmptiesWhatSandboxesShare(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	first := newSandbox(t, c, client.CreateOptions{})
	if err := first.WriteFile(ctx, "/var/cache/sandbox/marker", []byte("kept\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := newSandbox(t, c, client.CreateOptions{})
	if data, err := second.ReadFile(ctx, "/var/cache/sandbox/marker", client.ReadOptions{}); err != nil || string(data) != "kept\n" {
		t.Fatalf("another sandbox of the same owner reads the cache's marker: %q, %v; want what the first wrote", data, err)
	}
	if err := c.ClearCache(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := second.ReadFile(ctx, "/var/cache/sandbox/marker", client.ReadOptions{}); !errors.Is(err, client.ErrNoSuchFile) {
		t.Errorf("the cache's marker after ClearCache: %v; want ErrNoSuchFile", err)
	}
}

// Properties are Status as the bus gives it, by D-Bus name; Expires
// reads its own alone.
func TestPropertiesAndExpiresAgreeWithStatus(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{TTL: time.Hour, MemoryMax: 256 * sandboxd1.MiB})
	st, err := sb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	props, err := sb.Properties(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := props[sandboxd1.PropID].Value().(string); id != sb.ID() || id != st.ID {
		t.Errorf("Properties' %s is %q; want %q, as Status says", sandboxd1.PropID, id, sb.ID())
	}
	if us, _ := props[sandboxd1.PropExpires].Value().(uint64); !time.UnixMicro(int64(us)).Equal(st.Expires) {
		t.Errorf("Properties' %s is %d µs; Status says %v", sandboxd1.PropExpires, us, st.Expires)
	}
	expires, err := sb.Expires(ctx)
	if err != nil || !expires.Equal(st.Expires) || time.Until(expires) > time.Hour || time.Until(expires) < 50*time.Minute {
		t.Errorf("Expires: %v, %v; want %v, within the hour", expires, err, st.Expires)
	}
}
