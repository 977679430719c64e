package nsinit

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// CacheMounted reports whether the sandbox whose init is pid has its
// owner's cache at CachePath (the daemon's side: its mount table, as the
// init sees it; the sandbox's commands cannot mount).
func CacheMounted(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return false, fmt.Errorf("reading the mounts of sandbox init %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == CachePath {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading the mounts of sandbox init %d: %w", pid, err)
	}
	return false, nil
}
