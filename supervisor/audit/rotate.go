package audit

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Options bound the log; a zero field takes its default.
type Options struct {
	// MaxSize is the live file's size past which it is rotated: a line
	// that would take it further goes into a fresh file.
	MaxSize int64
	// Keep is how many files are kept in all: the live one (audit.log)
	// and Keep-1 rotated ones (audit.log.1 the newest). So the log holds
	// at most Keep × MaxSize bytes (a single line larger than MaxSize
	// has a file of its own).
	Keep int
	// Budget bounds each caller's lines (budget.go).
	Budget Budget
	// OnError hears what failed where no call returns it: the LeftOut
	// lines written at an interval's end.
	OnError func(error)
}

// The defaults: 4 files of 64 MiB, 256 MiB in all.
const (
	DefaultMaxSize = 64 << 20
	DefaultKeep    = 4
)

func (o Options) withDefaults() Options {
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	o.Budget = o.Budget.withDefaults()
	return o
}

// crashHook, when set (by this package's tests), is called at each step
// of a rotation: a test kills the process there.
var crashHook func(step string)

func hit(step string) {
	if crashHook != nil {
		crashHook(step)
	}
}

// openDir opens the log's directory, which must be the daemon's alone:
// a directory that another user may write is one where it could plant a
// link at a name the daemon renames or opens. (systemd's LogsDirectory=
// makes it root's, 0755; the package's tmpfiles.d, 0750.)
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log's directory %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		dir.Close()
		return nil, fmt.Errorf("reading the audit log's directory %s: %w", path, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		dir.Close()
		return nil, fmt.Errorf("the audit log's directory %s is owned by uid %d with mode %04o: it must be the daemon's (uid %d), writable by no one else: chown it and chmod go-w it",
			path, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return dir, nil
}

// openLive opens the live file in l.dir for appending, never through a
// link, and returns it with its size; fresh, it must not exist yet. A
// file found there must be a regular file of the daemon's: its mode is
// made 0600 whatever it was.
func (l *Log) openLive(fresh bool) (*os.File, int64, error) {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if fresh {
		flags |= unix.O_EXCL
	}
	path := l.dir.Name() + "/" + l.name
	fd, err := unix.Openat(int(l.dir.Fd()), l.name, flags, 0o600)
	if err == unix.ELOOP {
		return nil, 0, fmt.Errorf("opening the audit log %s: it is a symbolic link, which the daemon does not follow: remove it: %w", path, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("opening the audit log %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("reading the audit log %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, 0, fmt.Errorf("the audit log %s is not a regular file of uid %d (mode %06o, uid %d): move it away", path, os.Geteuid(), st.Mode, st.Uid)
	}
	if st.Mode&0o7777 != 0o600 {
		if err := unix.Fchmod(fd, 0o600); err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("making the audit log %s mode 0600: %w", path, err)
		}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("opening the audit log %s: %w", path, err)
	}
	return f, st.Size, nil
}

// rotated is the name of the i-th rotated file (1 the newest).
func (l *Log) rotated(i int) string { return l.name + "." + strconv.Itoa(i) }

// rotate moves every file one name up (audit.log.2 to .3, ..., the live
// one to .1; the last name's file is replaced, so removed) and opens a
// fresh live file. Each step is one rename(2) within the directory,
// which acts on the names and never follows a link planted there; every
// line is already synced in the file that carries it, so a kill between
// any two steps loses none: the next start finds a gap in the numbers,
// or no live file, and makes one.
func (l *Log) rotate() error {
	dfd := int(l.dir.Fd())
	for i := l.opts.Keep - 2; i >= 1; i-- {
		if err := unix.Renameat(dfd, l.rotated(i), dfd, l.rotated(i+1)); err != nil && err != unix.ENOENT {
			return fmt.Errorf("rotating the audit log: renaming %s to %s in %s: %w", l.rotated(i), l.rotated(i+1), l.dir.Name(), err)
		}
	}
	hit("shifted")
	// ENOENT: a rotation that failed after this step renamed it already.
	if err := unix.Renameat(dfd, l.name, dfd, l.rotated(1)); err != nil && err != unix.ENOENT {
		return fmt.Errorf("rotating the audit log: renaming %s to %s in %s: %w", l.name, l.rotated(1), l.dir.Name(), err)
	}
	hit("renamed")
	f, size, err := l.openLive(true)
	if err != nil {
		// The old file, now .1, takes the lines until a retry.
		return fmt.Errorf("rotating the audit log: %w", err)
	}
	hit("opened")
	// The renames made durable before the new file takes lines.
	if err := l.dir.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("rotating the audit log: syncing %s: %w", l.dir.Name(), err)
	}
	old := l.f
	l.f, l.size = f, size
	l.retryAt = time.Time{}
	return old.Close()
}
