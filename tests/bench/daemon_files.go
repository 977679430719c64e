package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The file API (issue 19), in one sandbox without a user namespace: a
// large file written and read through the caller's pipe (WriteFileFrom,
// ReadFileTo), beside the same bytes written and read by the bench on the
// same btrfs directly; and a small read as an ay (ReadFile) beside the
// same through a pipe, which says what godbus's ay costs.

const filesNote = "The rows of the file API come from one sandbox of the 1k project without a user namespace: " +
	"each large file is random bytes written into /tmp of the sandbox (its writable volume, on the testbed's btrfs) with `WriteFileFrom` and read back whole with `ReadFileTo`, through the bench's pipe, " +
	"beside the bench writing and reading the same bytes in a file of its own on the same btrfs (the page cache warm for both reads); " +
	"ReadFile's `ay` and ReadFileTo's pipe each read the same 1 MiB file."

const (
	fileRuns      = 10
	bigFileBytes  = 64 << 20
	smallReadRuns = 20
	smallBytes    = 1 << 20
)

// benchFiles adds the file API's rows, measured in a new sandbox of the
// project of n files.
func benchFiles(ctx context.Context, d *daemon, t *table, fs *btrfsFS, n int) (err error) {
	begin := time.Now()
	id, err := d.create(ctx, projectName(n))
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, d.destroy(context.WithoutCancel(ctx), id))
	}()
	data := make([]byte, bigFileBytes)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	direct := filepath.Join(fs.mount, "bench-file-direct")
	defer os.Remove(direct)
	var writes, reads, directWrites, directReads series
	err = (loop{reps: fileRuns, min: fileRuns}).run(ctx, "file API", func(warm bool) error {
		dw, err := timed(func() error { return os.WriteFile(direct, data, 0o644) })
		if err != nil {
			return err
		}
		ww, err := timed(func() error { return d.writeFileFrom(ctx, id, "/tmp/big", bytes.NewReader(data)) })
		if err != nil {
			return err
		}
		var got bytes.Buffer
		rr, err := timed(func() error { return d.readFileTo(ctx, id, "/tmp/big", &got) })
		if err != nil {
			return err
		}
		if !bytes.Equal(got.Bytes(), data) {
			return fmt.Errorf("ReadFileTo gave %d bytes, not the %d written", got.Len(), len(data))
		}
		dr, err := timed(func() error {
			b, err := os.ReadFile(direct)
			if err == nil && len(b) != len(data) {
				err = fmt.Errorf("read %d bytes of %s", len(b), direct)
			}
			return err
		})
		if err != nil {
			return err
		}
		if !warm {
			writes, reads = append(writes, ww), append(reads, rr)
			directWrites, directReads = append(directWrites, dw), append(directReads, dr)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.add(row{fs: "btrfs", files: n, s: writes,
		op: fmt.Sprintf("`WriteFileFrom` of %d MiB through the caller's pipe, %d runs: %s (the bench's own write of the same bytes on the same btrfs beside it: %s ms, %s)",
			bigFileBytes>>20, len(writes), mbps(bigFileBytes, writes.median()), ms(directWrites.median()), mbps(bigFileBytes, directWrites.median())),
		ratio: ratio(writes.median(), directWrites.median()), verdict: "no target"})
	t.add(row{fs: "btrfs", files: n, s: reads,
		op: fmt.Sprintf("`ReadFileTo` of that file through the caller's pipe, %d runs: %s (the bench's own read of its copy beside it: %s ms, %s)",
			len(reads), mbps(bigFileBytes, reads.median()), ms(directReads.median()), mbps(bigFileBytes, directReads.median())),
		ratio: ratio(reads.median(), directReads.median()), verdict: "no target"})
	if err := benchSmallRead(ctx, d, t, n, id, data[:smallBytes]); err != nil {
		return err
	}
	progress("file API: %v", time.Since(begin).Round(time.Millisecond))
	return nil
}

// benchSmallRead times ReadFile (an ay) of smallBytes beside ReadFileTo
// of the same file.
func benchSmallRead(ctx context.Context, d *daemon, t *table, n int, id string, data []byte) error {
	if err := d.writeFileFrom(ctx, id, "/tmp/small", bytes.NewReader(data)); err != nil {
		return err
	}
	var ays, pipes series
	err := (loop{reps: smallReadRuns, min: smallReadRuns}).run(ctx, "ReadFile", func(warm bool) error {
		var got []byte
		da, err := timed(func() error {
			return d.call(ctx, id, sandboxd1.MethodReadFile, []any{"/tmp/small", uint64(0), uint64(0)}, &got)
		})
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("ReadFile gave %d bytes, not the %d written", len(got), len(data))
		}
		var buf bytes.Buffer
		dp, err := timed(func() error { return d.readFileTo(ctx, id, "/tmp/small", &buf) })
		if err != nil {
			return err
		}
		if !warm {
			ays, pipes = append(ays, da), append(pipes, dp)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.add(row{fs: "btrfs", files: n, s: ays,
		op: fmt.Sprintf("`ReadFile` of %d MiB as an `ay`, %d calls: %s (`ReadFileTo` of the same file beside it: %s ms); godbus encodes and decodes an `ay` a byte at a time",
			smallBytes>>20, len(ays), mbps(smallBytes, ays.median()), ms(pipes.median())),
		ratio: ratio(ays.median(), pipes.median()), verdict: "no target"})
	return nil
}

// readFileTo reads path of sandbox id whole into w through a pipe.
func (d *daemon) readFileTo(ctx context.Context, id, path string, w io.Writer) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, pr)
		pr.Close()
		copied <- err
	}()
	var n uint64
	err = d.call(ctx, id, sandboxd1.MethodReadFileTo, []any{path, dbus.UnixFD(pw.Fd()), map[string]dbus.Variant{}}, &n)
	pw.Close()
	return errors.Join(err, <-copied)
}

// writeFileFrom writes what r gives to path of sandbox id through a pipe.
func (d *daemon) writeFileFrom(ctx context.Context, id, path string, r io.Reader) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, r)
		pw.Close()
		copied <- err
	}()
	var n uint64
	err = d.call(ctx, id, sandboxd1.MethodWriteFileFrom, []any{path, dbus.UnixFD(pr.Fd()), map[string]dbus.Variant{}}, &n)
	pr.Close()
	return errors.Join(err, <-copied)
}
