package promotion

// A change set's digest: what an approver saw, so that an approval can
// name it and be refused when the change is no longer that.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/fsat"
)

// digestChunk is how much of a file is hashed between two looks at ctx.
const digestChunk = 1 << 20

// digest is a hash of a change set as it will be applied: each change's
// kind, type and paths, and of each path the change leaves in source (a
// read-only snapshot: what the promotion applies) its type, permission
// bits, owner and size, a regular file's content and a symlink's target
// (what a unified diff shows; times are left out, as the diff leaves
// them). Two different edits of one file have different digests.
//
// source is a sandbox's tree: each path is opened beneath it, through
// no symlink (the last component not followed), and only a regular
// file's data is read, streamed through the hash with ctx looked at
// every digestChunk: the work follows the change's size, and nothing of
// a file is held.
func digest(ctx context.Context, changes []cowfs.Change, source string) (string, error) {
	root, err := unix.Open(source, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening the promotion's source %s to hash its change: %w", source, err)
	}
	defer unix.Close(root)
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("hashing the change set: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\n", c.Kind, c.Type, c.Path, c.NewPath)
		if c.Kind == cowfs.Deleted {
			continue
		}
		at := c.Path
		if c.Kind == cowfs.Renamed && c.NewPath != "" {
			at = c.NewPath
		}
		if err := hashPath(ctx, h, root, at, buf); err != nil {
			return "", fmt.Errorf("hashing %s of the change set: %w", strconv.Quote(at), err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// listDigest is the digest of a change list alone (kinds, types and
// paths), which records written before digest covered content hold.
func listDigest(changes []cowfs.Change) string {
	h := sha256.New()
	for _, c := range changes {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\n", c.Kind, c.Type, c.Path, c.NewPath)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hashPath writes what path under root holds to h: "absent" if nothing
// (the change list said so), else its type and mode, owner and size,
// and a file's content's or a symlink's target's own hash.
func hashPath(ctx context.Context, h hash.Hash, root int, path string, buf []byte) error {
	fd, err := fsat.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		fmt.Fprint(h, "absent\n")
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	fmt.Fprintf(h, "%o %d:%d %d\n", st.Mode&(unix.S_IFMT|0o7777), st.Uid, st.Gid, st.Size)
	inner := sha256.New()
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := fsat.Readlink(fd, "")
		if err != nil {
			return err
		}
		io.WriteString(inner, target)
	case unix.S_IFREG:
		// Reopened for reading from the O_PATH descriptor: the same
		// inode, whatever the tree holds now.
		f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := io.CopyBuffer(inner, io.LimitReader(f, digestChunk), buf)
			if err != nil {
				return err
			}
			if n < digestChunk {
				break
			}
		}
	default:
		return nil // a directory, fifo, socket or device: its mode and owner say it
	}
	fmt.Fprintf(h, "%x\n", inner.Sum(nil))
	return nil
}
