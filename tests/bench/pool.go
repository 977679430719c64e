package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	dbtrfs "github.com/dennwc/btrfs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// pool is one filesystem under test: a cowfs backend on it, and the few
// things the benchmark does beside cowfs (making projects, scratch volumes
// for copies) that differ between btrfs and ZFS.
type pool struct {
	name    string
	where   string // the filesystem, for the report
	backend cowfs.Backend
	fs      fsOps
}

// fsOps are the filesystem's own ways of making and removing what the
// benchmark needs around cowfs.
type fsOps interface {
	// newProject makes an empty project volume called name and returns
	// its location (for Backend.Project) and where its files are.
	newProject(ctx context.Context, name string) (location, dir string, err error)
	// dropProject removes a project with whatever was made from it; it is
	// quiet when the project is already gone.
	dropProject(ctx context.Context, location string) error
	// newScratch makes an empty volume of the same pool to copy into.
	newScratch(ctx context.Context, name string) (dir string, err error)
	dropScratch(ctx context.Context, name string) error
	// settle writes back what is dirty and waits for background cleaning,
	// untimed, so that one run's leftovers do not land in the next timing.
	settle(ctx context.Context) error
	// close removes the backend's root and anything else made at open.
	close(ctx context.Context) error
}

func openPool(ctx context.Context, name string) (*pool, error) {
	switch name {
	case "btrfs":
		return openBtrfs(ctx)
	case "zfs":
		return openZFS(ctx)
	}
	return nil, fmt.Errorf("unknown backend %q", name)
}

func (p *pool) close(ctx context.Context) error {
	err := p.backend.Close()
	return errors.Join(err, p.fs.close(ctx))
}

// command makes a command that runs in "/": the directory this process
// was started in may not exist in the testbed's mount namespace (rsync
// fails on that).
func command(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	return cmd
}

// tool runs a tool and says what failed with what it printed.
func tool(ctx context.Context, argv ...string) (string, error) {
	out, err := command(ctx, argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// syncFS writes back the filesystem holding dir, and only that one.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("syncing the filesystem of %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncing the filesystem of %s: %w", dir, err)
	}
	return nil
}

// btrfsFS is the testbed's btrfs: the backend's root, the projects and the
// copies' subvolumes all sit directly under its mount point.
type btrfsFS struct {
	mount, root string
}

func openBtrfs(ctx context.Context) (*pool, error) {
	fs := &btrfsFS{mount: testbed.BtrfsMount, root: filepath.Join(testbed.BtrfsMount, "bench-root")}
	b, err := btrfs.Open(ctx, fs.root)
	if err != nil {
		return nil, fmt.Errorf("opening the btrfs backend at %s: %w", fs.root, err)
	}
	return &pool{name: "btrfs", where: "the testbed's loop image", backend: b, fs: fs}, nil
}

func (f *btrfsFS) newProject(ctx context.Context, name string) (string, string, error) {
	path := filepath.Join(f.mount, name)
	if err := dbtrfs.CreateSubVolume(path); err != nil {
		return "", "", fmt.Errorf("making project subvolume %s: %w", path, err)
	}
	return path, path, nil
}

func (f *btrfsFS) dropProject(ctx context.Context, location string) error {
	return deleteSubvolume(location)
}

func (f *btrfsFS) newScratch(ctx context.Context, name string) (string, error) {
	path := filepath.Join(f.mount, name)
	if err := dbtrfs.CreateSubVolume(path); err != nil {
		return "", fmt.Errorf("making scratch subvolume %s: %w", path, err)
	}
	return path, nil
}

func (f *btrfsFS) dropScratch(ctx context.Context, name string) error {
	return deleteSubvolume(filepath.Join(f.mount, name))
}

func (f *btrfsFS) settle(ctx context.Context) error {
	// Deleted subvolumes are cleaned by a kernel thread after the ioctl
	// returns; wait for it rather than time it into the next run. `btrfs
	// filesystem sync` wakes that thread: without it, it waits for the
	// next periodic commit (30 s).
	if _, err := tool(ctx, "btrfs", "filesystem", "sync", f.mount); err != nil {
		return err
	}
	_, err := tool(ctx, "btrfs", "subvolume", "sync", f.mount)
	return err
}

// close deletes whatever is left under the backend's root (after an
// error; a clean run leaves it empty), then the root directory.
func (f *btrfsFS) close(ctx context.Context) error {
	entries, err := os.ReadDir(f.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("cleaning up %s: %w", f.root, err)
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(f.root, e.Name())
		if sub, _ := dbtrfs.IsSubVolume(path); sub {
			errs = append(errs, deleteSubvolume(path))
		} else {
			errs = append(errs, os.RemoveAll(path))
		}
	}
	if err := os.Remove(f.root); err != nil {
		errs = append(errs, fmt.Errorf("cleaning up %s: %w", f.root, err))
	}
	return errors.Join(errs...)
}

// deleteSubvolume deletes the subvolume at path, if there is one.
func deleteSubvolume(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := dbtrfs.DeleteSubVolume(path); err != nil {
		return fmt.Errorf("deleting subvolume %s: %w", path, err)
	}
	return nil
}

// zfsFS is a zfs-fuse pool of the benchmark's own, on a sparse image beside
// the testbed's: 100k small files take about 4 KiB each on zfs-fuse, more
// than the testbed's 512 MiB pool holds with a copy beside them. It is the
// same zfs-fuse daemon and pool version as the testbed's pool.
type zfsFS struct {
	pool, image, mount, root string
}

const (
	zfsPool    = "benchpool"
	zfsImageMB = 4096
)

func openZFS(ctx context.Context) (p *pool, err error) {
	shared, err := testbedShared()
	if err != nil {
		return nil, err
	}
	f := &zfsFS{
		pool:  zfsPool,
		image: filepath.Join(shared, "bench-zfs.img"),
		mount: "/mnt/bench-zfs",
		root:  zfsPool + "/bench-root",
	}
	// A pool left by a killed run of ours inside a testbed that stayed up.
	if _, err := tool(ctx, "zpool", "list", "-H", f.pool); err == nil {
		progress("zfs: destroying pool %s left by an earlier run", f.pool)
		if _, err := tool(ctx, "zpool", "destroy", "-f", f.pool); err != nil {
			return nil, fmt.Errorf("destroying the leftover pool %s: %w", f.pool, err)
		}
	}
	img, err := os.OpenFile(f.image, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("making the zfs image %s: %w", f.image, err)
	}
	err = img.Truncate(zfsImageMB << 20)
	if cerr := img.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.image)
		return nil, fmt.Errorf("sizing the zfs image %s: %w", f.image, err)
	}
	if _, err := tool(ctx, "zpool", "create", "-m", f.mount, f.pool, f.image); err != nil {
		_ = os.Remove(f.image)
		return nil, fmt.Errorf("making zfs pool %s: %w", f.pool, err)
	}
	defer func() {
		if err != nil {
			_ = f.close(context.WithoutCancel(ctx))
		}
	}()
	b, err := zfs.Open(ctx, f.root)
	if err != nil {
		return nil, fmt.Errorf("opening the zfs backend at %s: %w", f.root, err)
	}
	where := fmt.Sprintf("a pool of its own on a %d GiB sparse file", zfsImageMB>>10)
	return &pool{name: "zfs", where: where, backend: b, fs: f}, nil
}

// testbedShared is the testbed's shared directory: the directory of the
// description named by the testbed's environment variable. It is on the
// host's disk (not in the overlay), and goes when the testbed ends.
func testbedShared() (string, error) {
	path := os.Getenv("SANDBOXD_TESTBED")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("finding the testbed's shared directory: %w", err)
	}
	return filepath.Dir(path), nil
}

func (f *zfsFS) newProject(ctx context.Context, name string) (string, string, error) {
	ds := f.pool + "/" + name
	if _, err := tool(ctx, "zfs", "create", ds); err != nil {
		return "", "", fmt.Errorf("making project dataset: %w", err)
	}
	out, err := tool(ctx, "zfs", "get", "-H", "-o", "value", "mountpoint", ds)
	if err != nil {
		return "", "", fmt.Errorf("finding where %s is mounted: %w", ds, err)
	}
	return ds, strings.TrimSpace(out), nil
}

// dropProject destroys the project with its snapshots and their clones
// (-R), forcing unmounts (-f): zfs-fuse calls a mounted dataset busy.
func (f *zfsFS) dropProject(ctx context.Context, location string) error {
	return f.destroy(ctx, location, "-R", "-f")
}

func (f *zfsFS) newScratch(ctx context.Context, name string) (string, error) {
	ds, dir, err := f.newProject(ctx, name)
	if err != nil {
		return "", fmt.Errorf("making scratch dataset %s: %w", ds, err)
	}
	return dir, nil
}

func (f *zfsFS) dropScratch(ctx context.Context, name string) error {
	return f.destroy(ctx, f.pool+"/"+name, "-r", "-f")
}

// destroy destroys a dataset if it exists, retrying a moment while
// zfs-fuse still calls it busy just after an unmount.
func (f *zfsFS) destroy(ctx context.Context, ds string, flags ...string) error {
	if _, err := tool(ctx, "zfs", "list", "-H", "-o", "name", ds); err != nil {
		return nil // already gone
	}
	return retryBusy(ctx, append(append([]string{"zfs", "destroy"}, flags...), ds)...)
}

// retryBusy runs a zfs or zpool command, again for a few seconds while
// zfs-fuse calls what it acts on busy: it does for a moment after an
// unmount.
func retryBusy(ctx context.Context, argv ...string) error {
	for attempt := 0; ; attempt++ {
		_, err := tool(ctx, argv...)
		if err == nil || attempt == 50 || !strings.Contains(err.Error(), "busy") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (f *zfsFS) settle(ctx context.Context) error {
	return syncFS(f.mount)
}

// close destroys the whole pool and its image: everything the benchmark
// made on ZFS goes with it.
func (f *zfsFS) close(ctx context.Context) error {
	var errs []error
	if _, err := tool(ctx, "zpool", "list", "-H", f.pool); err == nil {
		if err := retryBusy(ctx, "zpool", "destroy", "-f", f.pool); err != nil {
			errs = append(errs, fmt.Errorf("destroying pool %s: %w", f.pool, err))
		}
	}
	if err := os.Remove(f.image); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing the zfs image: %w", err))
	}
	_ = os.Remove(f.mount)
	return errors.Join(errs...)
}
