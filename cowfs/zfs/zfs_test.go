package zfs_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

var ctx = context.Background()

func TestConformance(t *testing.T) {
	tb := testbed.Require(t)
	n := 0
	cowfstest.Run(t, func(t *testing.T) cowfstest.Pool {
		n++
		root := fmt.Sprintf("%s/root%d", tb.ZFS.Pool, n)
		proj := fmt.Sprintf("%s/proj%d", tb.ZFS.Pool, n)
		testbed.MustRun(t, "zfs", "create", proj)
		b, err := zfs.Open(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := cowfstest.DeleteAll(ctx, b); err != nil {
				t.Errorf("cleaning up %s: %v", root, err)
			}
			_ = exec.Command("zfs", "unmount", root).Run()
			_ = exec.Command("zfs", "destroy", "-r", root).Run()
			_ = exec.Command("zfs", "unmount", proj).Run()
			_ = exec.Command("zfs", "destroy", "-r", proj).Run()
		})
		project, err := b.Project(ctx, proj)
		if err != nil {
			t.Fatal(err)
		}
		leftovers := func(t *testing.T) []string {
			var left []string
			for _, ds := range []string{root, proj} {
				out, err := exec.Command("zfs", "list", "-H", "-o", "name", "-t", "filesystem,snapshot", "-r", ds).CombinedOutput()
				if err != nil {
					t.Fatalf("zfs list -r %s: %v: %s", ds, err, out)
				}
				for _, name := range strings.Fields(string(out)) {
					if name != ds {
						left = append(left, name)
					}
				}
			}
			return left
		}
		return cowfstest.Pool{Backend: b, Project: project, Foreign: "otherpool/web", ForeignErr: cowfs.ErrOutsidePool, Leftovers: leftovers}
	})
}

func TestOpenOnAMissingPoolNamesIt(t *testing.T) {
	testbed.Require(t)
	_, err := zfs.Open(ctx, "nosuchpool/sandboxd")
	if !errors.Is(err, cowfs.ErrNotFound) || !strings.Contains(err.Error(), "nosuchpool") {
		t.Fatalf("Open on a missing pool: %v; want ErrNotFound naming it", err)
	}
}

func TestCapabilitiesOfZFSFuse(t *testing.T) {
	tb := testbed.Require(t)
	b, err := zfs.Open(ctx, tb.ZFS.Pool+"/capsroot")
	if err != nil {
		t.Fatal(err)
	}
	info := b.Info()
	// zfs-fuse (pool version 23) has neither `zfs diff` nor "written@".
	if info.Capabilities.FastChanges || info.Capabilities.Generation || !strings.Contains(info.Version, "23") {
		t.Fatalf("zfs-fuse reported as %+v", info)
	}
}

func TestFullPool(t *testing.T) {
	testbed.Require(t)
	img := filepath.Join(t.TempDir(), "small.img")
	if out, err := exec.Command("truncate", "-s", "128M", img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	if out, err := exec.Command("zpool", "create", "-m", "/mnt/testbed-small", "smallpool", img).CombinedOutput(); err != nil {
		t.Fatalf("zpool create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("zpool", "destroy", "-f", "smallpool").Run() })
	testbed.MustRun(t, "zfs", "create", "smallpool/proj")
	b, err := zfs.Open(ctx, "smallpool/root")
	if err != nil {
		t.Fatal(err)
	}
	project, err := b.Project(ctx, "smallpool/proj")
	if err != nil {
		t.Fatal(err)
	}
	// zfs-fuse itself dies now and then when a write fills its pool
	// ("transport endpoint is not connected"), so the space is taken the
	// way an administrator's reservation takes it: no data written, the
	// pool as full for a receive.
	takeSpace := func(t *testing.T) func() {
		out, err := exec.Command("zfs", "get", "-Hp", "-o", "value", "available", "smallpool").Output()
		if err != nil {
			t.Fatal(err)
		}
		avail, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		testbed.MustRun(t, "zfs", "create", "-o", "canmount=off", "-o", fmt.Sprintf("refreservation=%d", avail-(1<<20)), "smallpool/hog")
		return func() { testbed.MustRun(t, "zfs", "destroy", "smallpool/hog") }
	}
	cowfstest.FullPool(t, cowfstest.Pool{Backend: b, Project: project}, takeSpace)
}
