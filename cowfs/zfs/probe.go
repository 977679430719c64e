package zfs

import (
	"context"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

func version(ctx context.Context, pool string) string {
	if out, err := command.Output(ctx, "zfs", "version"); err == nil {
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	// zfs-fuse's `zpool get` takes no flags: read the VALUE column.
	lines, err := command.Lines(ctx, "zpool", "get", "version", pool)
	if err != nil || len(lines) < 2 {
		return "unknown"
	}
	f := strings.Fields(strings.Join(lines[len(lines)-1], " "))
	if len(f) < 3 {
		return "unknown"
	}
	return "zfs-fuse, pool version " + f[2]
}

// overlayUpper reports whether a ZFS of this version can carry an
// overlayfs upper layer: OpenZFS from 2.2 (`zfs version` prints
// "zfs-2.2.0-1"); not zfs-fuse.
func overlayUpper(version string) bool {
	v, ok := strings.CutPrefix(version, "zfs-")
	if !ok {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 2
}
