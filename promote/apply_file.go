package promote

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fsat"
)

// replace writes the source's entry name (not a directory) under a
// temporary name beside the target's name, with its owner, mode and times
// set on the new inode itself, and renames it over name. No inode that
// was in the target is ever changed: whatever is at name is replaced.
func (ap *applier) replace(srcDir, dstDir int, name string, st *unix.Stat_t) error {
	tmp := tmpName(name)
	made, err := ap.writeTemp(srcDir, dstDir, name, tmp, st)
	if err != nil {
		_ = unix.Unlinkat(dstDir, tmp, 0)
		return err
	}
	err = unix.Renameat(dstDir, tmp, dstDir, name)
	if (errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) && ap.keepDirs {
		_ = unix.Unlinkat(dstDir, tmp, 0)
		return errKept
	}
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		// A directory where the file goes (the change list named the
		// directory's removal elsewhere, or the target made it since).
		if err = removeAt(dstDir, name); err == nil {
			err = unix.Renameat(dstDir, tmp, dstDir, name)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dstDir, tmp, 0)
		return fmt.Errorf("renaming into place: %w", err)
	}
	// The name was renamed, not the inode: someone who swapped the
	// temporary name put their own file in place. Say so.
	var now unix.Stat_t
	if err := unix.Fstatat(dstDir, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("reading it after the rename: %w", err)
	}
	if now.Ino != made.Ino || now.Dev != made.Dev {
		return fmt.Errorf("its temporary name %s was taken over by another %s (owned by uid %d) before the rename, which is now in its place: %w",
			tmp, kindName(now.Mode), now.Uid, ErrReplaced)
	}
	return nil
}

// tmpName is a temporary name beside name, unlikely to be anyone's.
func tmpName(name string) string {
	return ".sandboxd-" + randomHex() + "-" + truncate(name, 200)
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeTemp writes src's entry name as dst's tmp: a file's data, a
// symlink's target, a special file's node; then its owner, mode and
// times, on an fd of the inode it made (never by name: a host user who
// can write the directory may rename anything over tmp meanwhile). It
// returns the inode's stat.
func (ap *applier) writeTemp(srcDir, dstDir int, name, tmp string, st *unix.Stat_t) (unix.Stat_t, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ap.copyFile(srcDir, dstDir, name, tmp, st)
	case unix.S_IFLNK:
		target, err := fsat.Readlink(srcDir, name)
		if err != nil {
			return unix.Stat_t{}, fmt.Errorf("reading the link in the source: %w", err)
		}
		if err := unix.Symlinkat(target, dstDir, tmp); err != nil {
			return unix.Stat_t{}, fmt.Errorf("making the link: %w", err)
		}
	default: // fifo, socket, device
		if err := unix.Mknodat(dstDir, tmp, st.Mode, int(st.Rdev)); err != nil {
			return unix.Stat_t{}, fmt.Errorf("making the node: %w", err)
		}
	}
	testHook("created", dstDir, tmp)
	fd, made, err := ap.openMade(dstDir, tmp, st.Mode&unix.S_IFMT, unix.O_PATH)
	if err != nil {
		return made, err
	}
	defer unix.Close(fd)
	return made, setMeta(fd, st)
}

// copyFile writes src's regular file name as dst's tmp, with st's owner,
// mode and times, and returns the new inode's stat.
func (ap *applier) copyFile(srcDir, dstDir int, name, tmp string, st *unix.Stat_t) (unix.Stat_t, error) {
	var made unix.Stat_t
	in, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return made, fmt.Errorf("opening it in the source: %w", err)
	}
	inF := os.NewFile(uintptr(in), name)
	defer inF.Close()
	out, err := unix.Openat(dstDir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return made, fmt.Errorf("creating it in the target: %w", err)
	}
	outF := os.NewFile(uintptr(out), tmp)
	defer outF.Close()
	if err := unix.Fstat(out, &made); err != nil {
		return made, err
	}
	if st.Size > 0 {
		// A reflink shares the source's extents: O(1) in the data on btrfs.
		if err := unix.IoctlFileClone(out, in); err == nil {
			ap.a.Cloned += st.Size
		} else {
			n, err := io.Copy(outF, inF) // copy_file_range where the kernel can
			ap.a.Copied += n
			if err != nil {
				return made, fmt.Errorf("copying its data: %w", err)
			}
		}
	}
	testHook("created", dstDir, tmp)
	return made, setMeta(out, st)
}
