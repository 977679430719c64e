package btrfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

// notFound turns "no such file" into ErrNotFound, keeping the cause.
func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", cowfs.ErrNotFound, err)
	}
	return err
}

// classify maps errno values and btrfs tools' messages to the sentinels.
func classify(err error) error {
	if err == nil {
		return nil
	}
	stderr := command.Stderr(err)
	switch {
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(stderr, "No space left"):
		return fmt.Errorf("%w: %w", cowfs.ErrNoSpace, err)
	case errors.Is(err, syscall.EDQUOT) || strings.Contains(stderr, "Disk quota exceeded"):
		return fmt.Errorf("%w: %w", cowfs.ErrQuotaExceeded, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %w", cowfs.ErrExists, err)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("%w: %w", cowfs.ErrBusy, err)
	case errors.Is(err, syscall.EXDEV):
		return fmt.Errorf("%w: %w", cowfs.ErrOutsidePool, err)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: %w", cowfs.ErrReadOnly, err)
	case strings.Contains(stderr, "crc32 mismatch") || strings.Contains(stderr, "invalid command") ||
		strings.Contains(stderr, "short read") || strings.Contains(stderr, "unexpected EOF") ||
		strings.Contains(stderr, "Unsupported version") || strings.Contains(stderr, "invalid header"):
		return fmt.Errorf("%w: %w", cowfs.ErrCorruptStream, err)
	}
	return notFound(err)
}
