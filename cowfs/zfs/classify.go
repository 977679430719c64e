package zfs

import (
	"errors"
	"fmt"
	"strings"

	gozfs "github.com/mistifyio/go-zfs/v4"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

// classify maps what zfs and zpool print to the sentinels, for errors from
// our exec wrapper and from go-zfs alike.
func classify(err error) error {
	if err == nil {
		return nil
	}
	stderr := command.Stderr(err)
	var ge *gozfs.Error
	if errors.As(err, &ge) {
		stderr = ge.Stderr
	}
	msg := strings.ToLower(stderr)
	var sentinel error
	switch {
	case strings.Contains(msg, "does not exist") || strings.Contains(msg, "no such pool") ||
		strings.Contains(msg, "no such dataset") || strings.Contains(msg, "could not find any snapshots"):
		sentinel = cowfs.ErrNotFound
	case strings.Contains(msg, "already exists"):
		sentinel = cowfs.ErrExists
	case strings.Contains(msg, "busy") || strings.Contains(msg, "has children") ||
		strings.Contains(msg, "dependent clones") || strings.Contains(msg, "more recent snapshots"):
		sentinel = cowfs.ErrBusy
	case strings.Contains(msg, "out of space") || strings.Contains(msg, "no space"):
		sentinel = cowfs.ErrNoSpace
	case strings.Contains(msg, "quota exceeded"):
		sentinel = cowfs.ErrQuotaExceeded
	case strings.Contains(msg, "invalid backup stream") || strings.Contains(msg, "invalid stream") ||
		strings.Contains(msg, "checksum mismatch") || strings.Contains(msg, "stream is corrupt") ||
		strings.Contains(msg, "premature end") || strings.Contains(msg, "input stream") ||
		strings.Contains(msg, "incomplete stream") || strings.Contains(msg, "bad magic") ||
		strings.Contains(msg, "failed to read from stream"):
		sentinel = cowfs.ErrCorruptStream
	}
	if sentinel == nil {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
