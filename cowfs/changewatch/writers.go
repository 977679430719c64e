package changewatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Writers lists what could write to the files of the volume holding dir
// without a syscall fanotify sees: every descriptor open for writing on it
// and every shared mapping of one of its files, in every process this
// process's /proc shows (root's: all of them). A volume is matched by the
// st_dev its files report (a btrfs subvolume's own, so nested subvolumes
// and sibling sandboxes do not match); a mapping's file is stat'ed through
// /proc/PID/map_files (root only), as /proc/PID/maps names the
// filesystem's device, not the subvolume's. It cannot see a descriptor in
// flight in a unix socket's queue, nor io_uring's registered files (see
// docs/design-warmpool.md).
func Writers(dir string) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", dir, err)
	}
	dev := st.Dev
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range procs {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		base := filepath.Join("/proc", pid)
		fds, _ := os.ReadDir(filepath.Join(base, "fd")) // gone or a kernel thread: nothing
		for _, fd := range fds {
			// Cheap first (procfs alone): sockets, pipes and anonymous
			// inodes are no files of the volume; a descriptor not open for
			// writing is no writer. Only what is left is stat'ed.
			fdPath := filepath.Join(base, "fd", fd.Name())
			if target, err := os.Readlink(fdPath); err == nil && !strings.HasPrefix(target, "/") {
				continue
			}
			info, err := os.ReadFile(filepath.Join(base, "fdinfo", fd.Name()))
			if err != nil || !fdWritable(string(info)) {
				continue
			}
			var fst unix.Stat_t
			if unix.Stat(fdPath, &fst) != nil || fst.Dev != dev {
				continue
			}
			found = append(found, fmt.Sprintf("pid %s fd %s", pid, fd.Name()))
		}
		maps, err := os.ReadFile(filepath.Join(base, "maps"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(maps), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || len(f[1]) < 4 || f[1][3] != 's' || f[4] == "0" {
				continue
			}
			var mst unix.Stat_t
			if unix.Stat(filepath.Join(base, "map_files", f[0]), &mst) != nil || mst.Dev != dev {
				continue
			}
			found = append(found, fmt.Sprintf("pid %s shared mapping %s %s", pid, f[1], f[5]))
		}
	}
	return found, nil
}

// fdWritable reads fdinfo's "flags:" (octal open flags).
func fdWritable(info string) bool {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return true
			}
			return flags&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return true
}
