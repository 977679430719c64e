package fsat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// EmptyDir removes everything in the directory at path (a volume's root,
// in the pool, which no sandbox can replace) but the directory itself.
// Removal goes by descriptors under it (os.Root): a symlink there is
// removed, never followed, and nothing outside is reached, whatever a
// sandbox renames meanwhile. It reads a batch of names at a time, again
// from the start, until none is left (what a sandbox writes meanwhile
// goes too), for a bounded number of rounds: a sandbox that writes as
// fast as it is emptied does not hold the owner's cache lock for ever.
// (A cache's Clear empties it so, and an adoption's release the
// directory its files go back to.) A directory that keeps filling is an
// error wrapping busy, the caller's sentinel for it.
func EmptyDir(ctx context.Context, path string, busy error) error {
	root, err := os.OpenRoot(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer root.Close()
	for range 1024 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("emptying %s: %w", path, err)
		}
		dir, err := root.Open(".")
		if err != nil {
			return fmt.Errorf("opening %s: %w", path, err)
		}
		names, err := dir.Readdirnames(1024)
		dir.Close()
		if errors.Is(err, io.EOF) || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		var errs []error
		for _, name := range names {
			if err := root.RemoveAll(name); err != nil {
				errs = append(errs, fmt.Errorf("removing %s from %s: %w", name, path, err))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return fmt.Errorf("emptying %s: it keeps filling (a sandbox writes there): %w", path, busy)
}
