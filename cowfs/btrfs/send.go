package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	dbtrfs "github.com/dennwc/btrfs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

func (b *Backend) Changes(ctx context.Context, from, to cowfs.Volume) ([]cowfs.Change, error) {
	if !from.ReadOnly() || !to.ReadOnly() {
		return nil, fmt.Errorf("listing changes from %s to %s: btrfs sends only read-only snapshots: %w", from.Name, to.Name, cowfs.ErrReadOnly)
	}
	parentFS, err := dbtrfs.Open(from.ID, true)
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s: %w", from.Name, notFound(err))
	}
	parentID, err := parentFS.SubVolumeID()
	parentFS.Close()
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s: %w", from.Name, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	sent := make(chan error, 1)
	go func() {
		sent <- sendNoData(to.ID, parentID, pw)
		pw.Close()
	}()
	stop := context.AfterFunc(ctx, func() { pr.Close() }) // ends the send with EPIPE
	defer stop()
	// Reads of the sandbox's files from the host (a backup, rsync, a
	// find) move access times, which the stream sends as utimes: the
	// base's times tell those from real changes.
	changes, parseErr := sendstream.ChangesWith(pr, sendstream.Options{BaseTimes: baseTimes(from.Path)})
	pr.Close()
	if err := <-sent; err != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, errors.Join(ctx.Err(), classify(err)))
	}
	if parseErr != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, parseErr)
	}
	// The stream names the type of what it creates; for the rest (unlink,
	// rename, chmod of existing entries) the snapshots tell.
	for i, c := range changes {
		if c.Type != cowfs.TypeUnknown {
			continue
		}
		where := filepath.Join(from.Path, c.Path)
		if c.Kind == cowfs.Added {
			where = filepath.Join(to.Path, c.Path)
		}
		if fi, err := os.Lstat(where); err == nil {
			changes[i].Type = cowfs.TypeOf(fi.Mode())
		}
	}
	return changes, nil
}

func (b *Backend) Send(ctx context.Context, w io.Writer, from *cowfs.Volume, to cowfs.Volume) error {
	if !to.ReadOnly() || from != nil && !from.ReadOnly() {
		return fmt.Errorf("sending %s: btrfs sends only read-only snapshots: %w", to.Name, cowfs.ErrReadOnly)
	}
	parent := ""
	if from != nil {
		parent = from.ID
	}
	if err := dbtrfs.Send(w, parent, to.ID); err != nil {
		return fmt.Errorf("sending %s: %w", to.Name, classify(err))
	}
	return nil
}

// Receive runs `btrfs receive` into a temporary directory while our own
// parser checks the stream on the way, then renames the one subvolume it
// made into place. A stream that is corrupt, a full pool, or anything else
// that fails leaves nothing behind.
func (b *Backend) Receive(ctx context.Context, r io.Reader, name string) (v cowfs.Volume, err error) {
	path, err := b.path(name)
	if err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	if err := b.absent(name, path); err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	staging := filepath.Join(b.root, tmpPrefix+"recv-"+name)
	if err := os.Mkdir(staging, 0o700); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	defer func() {
		if rmErr := b.removeTree(context.WithoutCancel(ctx), staging); rmErr != nil && err == nil {
			err = fmt.Errorf("receiving %s: cleaning up: %w", name, rmErr)
		}
	}()

	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		checked <- sendstream.Check(pr)
		_, _ = io.Copy(io.Discard, pr)
	}()
	_, runErr := command.Run(ctx, command.Cmd{
		Argv:  []string{"btrfs", "receive", "-e", staging},
		Stdin: io.TeeReader(r, pw),
	})
	pw.Close()
	streamErr := <-checked
	runErr = classify(runErr)
	switch {
	case errors.Is(runErr, cowfs.ErrNoSpace) || errors.Is(runErr, cowfs.ErrQuotaExceeded):
		return v, fmt.Errorf("receiving %s: %w", name, runErr)
	case streamErr != nil:
		return v, fmt.Errorf("receiving %s: %w", name, streamErr)
	case runErr != nil:
		return v, fmt.Errorf("receiving %s: %w", name, runErr)
	}
	entries, err := os.ReadDir(staging)
	if err != nil || len(entries) != 1 {
		return v, fmt.Errorf("receiving %s: the stream made %d subvolumes, want 1: %w", name, len(entries), cowfs.ErrCorruptStream)
	}
	// btrfs will not move a read-only subvolume to another directory; a
	// read-only snapshot of it in place costs the same.
	if err := dbtrfs.SnapshotSubVolume(filepath.Join(staging, entries[0].Name()), path, true); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	return b.volume(name, path, cowfs.KindReadOnly, true)
}

// baseTimes reads the modification and change times of a path below root,
// through no symlink (the tree is a sandbox's).
func baseTimes(root string) func(path string) (time.Time, time.Time, bool) {
	return func(path string) (time.Time, time.Time, bool) {
		rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return time.Time{}, time.Time{}, false
		}
		defer unix.Close(rootFD)
		if path == "." || path == "" {
			path = "."
		}
		fd, err := unix.Openat2(rootFD, path, &unix.OpenHow{
			Flags:   uint64(unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return time.Time{}, time.Time{}, false
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return time.Time{}, time.Time{}, false
		}
		return time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix()), true
	}
}
