package pool_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/pool"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

var ctx = context.Background()

func TestEmbeddedPoolIsMadeMountedAndReused(t *testing.T) {
	testbed.Require(t)
	dir := t.TempDir()
	cfg := pool.Config{
		Image:      filepath.Join(dir, "lib", "pool.img"),
		Size:       512 << 20,
		Mountpoint: filepath.Join(dir, "lib", "pool"),
	}
	b, err := pool.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", cfg.Mountpoint).Run() })
	if info := b.Info(); info.Backend != "btrfs" || !strings.HasPrefix(info.Root, cfg.Mountpoint) {
		t.Fatalf("embedded pool is %+v", info)
	}
	if magic, name, _ := cowfs.FSType(cfg.Mountpoint); magic != cowfs.MagicBtrfs {
		t.Fatalf("%s is on %s; want the embedded btrfs", cfg.Mountpoint, name)
	}
	st, err := os.Stat(cfg.Image)
	if err != nil || st.Size() != 512<<20 {
		t.Fatalf("image: %v, %v; want 512 MiB", st, err)
	}
	if _, err := b.Create(ctx, "first"); err != nil {
		t.Fatal(err)
	}

	// A second open (a daemon restart) reuses the mounted pool.
	again, err := pool.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Get(ctx, "first"); err != nil {
		t.Fatalf("the volume made before the second open: %v", err)
	}

	// Unmounted (a reboot), it mounts the same image again.
	if out, err := exec.Command("umount", cfg.Mountpoint).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	again, err = pool.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Get(ctx, "first"); err != nil {
		t.Fatalf("the volume after a remount: %v", err)
	}
	// Nothing but the image and the mountpoint was made.
	entries, _ := os.ReadDir(filepath.Join(dir, "lib"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "pool pool.img" {
		t.Fatalf("the pool's directory holds %v; want only pool and pool.img", names)
	}
}

func TestEmbeddedPoolRefusesBadSettings(t *testing.T) {
	testbed.Require(t)
	dir := t.TempDir()
	_, err := pool.Open(ctx, pool.Config{Image: filepath.Join(dir, "small.img"), Size: 1 << 20, Mountpoint: filepath.Join(dir, "m")})
	if err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("a 1 MiB pool: %v; want a size error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "small.img")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused pool left its image: %v", err)
	}
	_, err = pool.Open(ctx, pool.Config{Image: "relative.img", Size: 512 << 20, Mountpoint: "/mnt/x"})
	if !errors.Is(err, cowfs.ErrInvalidName) {
		t.Fatalf("a relative image path: %v; want ErrInvalidName", err)
	}
	_, err = pool.Open(ctx, pool.Config{Backend: "ext4"})
	if err == nil || !strings.Contains(err.Error(), `"ext4"`) {
		t.Fatalf("an unknown backend: %v; want it named", err)
	}
}
