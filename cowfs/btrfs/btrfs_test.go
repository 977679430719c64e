package btrfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

var ctx = context.Background()

func TestConformance(t *testing.T) {
	tb := testbed.Require(t)
	n := 0
	cowfstest.Run(t, func(t *testing.T) cowfstest.Pool {
		n++
		root := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("root%d", n))
		proj := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("proj%d", n))
		if err := dbtrfs.CreateSubVolume(proj); err != nil {
			t.Fatal(err)
		}
		b, err := btrfs.Open(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := cowfstest.DeleteAll(ctx, b); err != nil {
				t.Errorf("cleaning up %s: %v", root, err)
			}
			_ = os.Remove(root)
			_ = dbtrfs.DeleteSubVolume(proj)
		})
		project, err := b.Project(ctx, proj)
		if err != nil {
			t.Fatal(err)
		}
		leftovers := func(t *testing.T) []string {
			entries, err := os.ReadDir(root)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			return left
		}
		return cowfstest.Pool{Backend: b, Project: project, Foreign: "/tmp", ForeignErr: cowfs.ErrUnsupportedFS, Leftovers: leftovers}
	})
}

func TestOpenOnAnotherFilesystemNamesIt(t *testing.T) {
	testbed.Require(t)
	_, err := btrfs.Open(ctx, "/tmp/sandboxd-root")
	if !errors.Is(err, cowfs.ErrUnsupportedFS) || !strings.Contains(err.Error(), "tmpfs") || !strings.Contains(err.Error(), "/tmp") {
		t.Fatalf("Open on tmpfs: %v; want ErrUnsupportedFS naming the path and tmpfs", err)
	}
	if _, err := os.Stat("/tmp/sandboxd-root"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Open left %s behind: %v", "/tmp/sandboxd-root", err)
	}
}

func TestProjectMustBeASubvolume(t *testing.T) {
	tb := testbed.Require(t)
	b, err := btrfs.Open(ctx, filepath.Join(tb.Btrfs.Mount, "rootp"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tb.Btrfs.Mount, "plain-dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	if _, err := b.Project(ctx, dir); !errors.Is(err, cowfs.ErrNotVolume) {
		t.Fatalf("a plain directory as project: %v; want ErrNotVolume", err)
	}
	if _, err := b.Project(ctx, "relative/path"); !errors.Is(err, cowfs.ErrInvalidName) {
		t.Fatalf("a relative project path: %v; want ErrInvalidName", err)
	}
}

func TestFullPool(t *testing.T) {
	testbed.Require(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "small.img"), filepath.Join(dir, "small")
	for _, argv := range [][]string{
		{"truncate", "-s", "256M", img},
		{"mkfs.btrfs", "-q", img},
		{"mkdir", mnt},
		{"mount", "-o", "loop", img, mnt},
		{"btrfs", "subvolume", "create", filepath.Join(mnt, "proj")},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	b, err := btrfs.Open(ctx, filepath.Join(mnt, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := b.Project(ctx, filepath.Join(mnt, "proj"))
	if err != nil {
		t.Fatal(err)
	}
	cowfstest.FullPool(t, cowfstest.Pool{Backend: b, Project: project}, nil)
}

// levelOne lists the level-1 qgroups of the testbed's btrfs.
func levelOne(t *testing.T, mount string) []string {
	t.Helper()
	out, err := exec.Command("findmnt", "-n", "-o", "UUID", "--target", mount).Output()
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join("/sys/fs/btrfs", strings.TrimSpace(string(out)), "qgroups"))
	var groups []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "1_") {
			groups = append(groups, e.Name())
		}
	}
	return groups
}

// A quota group a crash left without members is removed when the pool
// opens; one with a member stays.
func TestOpenRemovesQuotaGroupsLeftWithoutMembers(t *testing.T) {
	tb := testbed.Require(t)
	root := filepath.Join(tb.Btrfs.Mount, "rootg")
	b, err := btrfs.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cowfstest.DeleteAll(ctx, b); _ = os.Remove(root) })
	before := len(levelOne(t, tb.Btrfs.Mount))
	v, err := b.Create(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.GroupQuota(ctx, "kept", 1<<20, v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.GroupQuota(ctx, "kept", 0) })
	if err := b.GroupQuota(ctx, "orphan", 1<<20); err != nil {
		t.Fatal(err)
	}
	if n := len(levelOne(t, tb.Btrfs.Mount)); n != before+2 {
		t.Fatalf("level-1 qgroups after two groups were made: %d; want %d", n, before+2)
	}
	if _, err := btrfs.Open(ctx, root); err != nil {
		t.Fatal(err)
	}
	if n := len(levelOne(t, tb.Btrfs.Mount)); n != before+1 {
		t.Fatalf("level-1 qgroups after the pool opened again: %d; want %d (the group without members gone)", n, before+1)
	}
}
