package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// filesPerDir spreads a project's files the way a source tree does: many
// small directories (in groups of 10 under top directories), not one big one.
const filesPerDir = 100

// filePath is where file i of a project lives, relative to its root.
func filePath(i int) string {
	d := i / filesPerDir
	return filepath.Join(fmt.Sprintf("src%03d", d/10), fmt.Sprintf("pkg%d", d%10), fmt.Sprintf("file%02d.go", i%filesPerDir))
}

// content is file i's text: 200 to 800 bytes of source-like lines, the
// same on every run.
func content(i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 0x5eed))
	size := 200 + rng.IntN(601)
	b := fmt.Appendf(make([]byte, 0, size+64), "// Code of file %d.\npackage pkg%d\n\n", i, i/filesPerDir%10)
	for n := 0; len(b) < size; n++ {
		b = fmt.Appendf(b, "var v%d = %d // %x\n", n, rng.Int64(), rng.Uint64())
	}
	b = b[:size]
	b[size-1] = '\n'
	return b
}

// generate writes a project of n files under dir. Directories are written
// in parallel: on zfs-fuse each create is a few round trips to the daemon,
// and concurrent ones overlap. Progress goes to standard error.
func generate(ctx context.Context, label, dir string, n int) error {
	dirs := (n + filesPerDir - 1) / filesPerDir
	work := make(chan int)
	var written atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range 8 {
		wg.Go(func() {
			for d := range work {
				if err := writeDir(dir, d, n, &written); err != nil {
					select {
					case errs <- err:
					default:
					}
					cancel()
				}
			}
		})
	}
	begin := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
feed:
	for d := 0; d < dirs; d++ {
		for {
			select {
			case work <- d:
				continue feed
			case <-ctx.Done():
				break feed
			case <-tick.C:
				progress("%s: %d of %d files written (%v)", label, written.Load(), n, time.Since(begin).Round(time.Second))
			}
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("writing the project's files: %w", err)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing the project's files: %w", err)
	}
	progress("%s: %d files written in %v", label, n, time.Since(begin).Round(time.Millisecond))
	return nil
}

// writeDir writes the files of directory d (of a project of n files).
func writeDir(root string, d, n int, written *atomic.Int64) error {
	first := d * filesPerDir
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(filePath(first))), 0o755); err != nil {
		return err
	}
	for i := first; i < min(first+filesPerDir, n); i++ {
		if err := os.WriteFile(filepath.Join(root, filePath(i)), content(i), 0o644); err != nil {
			return err
		}
		written.Add(1)
	}
	return nil
}

// changeCount is how many changes makeChanges makes.
const changeCount = 10

// makeChanges makes changeCount changes to a project of n files at dir, a
// mix of what an agent's session leaves: 3 files modified, 3 added, 2
// deleted, 2 renamed (one in its directory, one to another directory), in
// far apart parts of the tree.
func makeChanges(dir string, n int) error {
	at := func(i int) string { return filepath.Join(dir, filePath(i)) }
	mid := n / 2
	for _, i := range []int{0, mid, n - 1} {
		f, err := os.OpenFile(at(i), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("modifying a file: %w", err)
		}
		_, err = f.WriteString("// changed in the sandbox\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("modifying a file: %w", err)
		}
	}
	for k, i := range []int{0, mid, n - 1} {
		path := filepath.Join(filepath.Dir(at(i)), fmt.Sprintf("added%d.go", k))
		if err := os.WriteFile(path, content(n+k), 0o644); err != nil {
			return fmt.Errorf("adding a file: %w", err)
		}
	}
	for _, i := range []int{1, mid + 1} {
		if err := os.Remove(at(i)); err != nil {
			return fmt.Errorf("deleting a file: %w", err)
		}
	}
	renames := [][2]string{
		{at(2), filepath.Join(filepath.Dir(at(2)), "renamed.go")},
		{at(mid + 2), filepath.Join(filepath.Dir(at(0)), "moved.go")},
	}
	for _, r := range renames {
		if err := os.Rename(r[0], r[1]); err != nil {
			return fmt.Errorf("renaming a file: %w", err)
		}
	}
	return nil
}
