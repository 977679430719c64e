package btrfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
)

// checkBtrfs says ErrUnsupportedFS unless path is on btrfs.
func checkBtrfs(path string) error {
	magic, name, err := cowfs.FSType(path)
	if err != nil {
		return err
	}
	if magic != cowfs.MagicBtrfs {
		return fmt.Errorf("%s is on %s, not btrfs: %w", path, name, cowfs.ErrUnsupportedFS)
	}
	return nil
}

func fsid(path string) (string, error) {
	fs, err := dbtrfs.Open(path, true)
	if err != nil {
		return "", err
	}
	defer fs.Close()
	info, err := fs.Info()
	if err != nil {
		return "", fmt.Errorf("reading the filesystem id: %w", err)
	}
	// The form /sys/fs/btrfs/ uses: 8-4-4-4-12 hex digits.
	h := info.FSID.String()
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// mountPoint finds the mount point of the filesystem that holds path: the
// deepest mount in mountinfo that is a prefix of path.
func mountPoint(path string) (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	best := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("no mount point found for %s", path)
	}
	return best, nil
}

func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || ma == major && mi >= minor
}
