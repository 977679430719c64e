package cowfstest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// writeUp writes up to max bytes into a new file at path, a MiB and an
// fsync at a time, and says how much went in and what stopped it.
func writeUp(path string, max int) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	chunk := bytes.Repeat([]byte{0x5a}, 1<<20)
	written := 0
	for written < max {
		n, err := f.Write(chunk)
		written += n
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return written, err
		}
	}
	return written, f.Close()
}

func quotaStop(err error) bool {
	return errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC)
}

// groupQuota: one bound over a sandbox's volume, its layer and its
// checkpoint, which a rollback to the checkpoint does not lift; removed,
// it bounds nothing. Without the capability, ErrUnsupported.
func groupQuota(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	sb := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "s1", false))
	layer := ok[cowfs.Volume](t)(p.Backend.Create(ctx, "l1"))
	const limit = 8 << 20
	err := p.Backend.GroupQuota(ctx, "g1", limit, sb, layer)
	if !p.Backend.Info().Capabilities.GroupQuota {
		if !errors.Is(err, cowfs.ErrUnsupported) {
			t.Fatalf("GroupQuota without the capability: %v; want ErrUnsupported", err)
		}
		check(t, p.Backend.GroupQuota(ctx, "g1", 0))
		return
	}
	check(t, err)
	if err := p.Backend.GroupQuota(ctx, "g1", limit, p.Project); !errors.Is(err, cowfs.ErrNotOurs) {
		t.Fatalf("the project in a group: %v; want ErrNotOurs", err)
	}
	// 6 MiB into the volume, then the layer stops at the 2 left.
	if n, err := writeUp(filepath.Join(sb.Path, "a"), 6<<20); err != nil {
		t.Fatalf("6 MiB into the volume of an 8 MiB group: %d bytes, %v", n, err)
	}
	syncFS(t, sb.Path)
	n, err := writeUp(filepath.Join(layer.Path, "b"), 20<<20)
	if !quotaStop(err) || n > 4<<20 {
		t.Fatalf("the layer after 6 MiB in the volume, group of 8 MiB: wrote %d bytes, %v; want EDQUOT by 2 MiB or so", n, err)
	}
	check(t, os.Remove(filepath.Join(layer.Path, "b")))
	syncFS(t, layer.Path)

	// A checkpoint joins; a rollback to it keeps the volume in the group
	// (what the old tree wrote still counts, held by the checkpoint).
	ck := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, sb, "c1", true))
	check(t, p.Backend.GroupQuota(ctx, "g1", limit, ck))
	check(t, p.Backend.Rollback(ctx, sb, ck))
	sb = ok[cowfs.Volume](t)(p.Backend.Get(ctx, "s1"))
	if n, err := writeUp(filepath.Join(sb.Path, "c"), 20<<20); !quotaStop(err) || n > 4<<20 {
		t.Fatalf("the volume after a rollback: wrote %d bytes, %v; want the group's bound to hold", n, err)
	}
	_ = os.Remove(filepath.Join(sb.Path, "c"))
	syncFS(t, sb.Path)

	// Removed (twice: a group not found is no error), it bounds nothing.
	check(t, p.Backend.GroupQuota(ctx, "g1", 0))
	check(t, p.Backend.GroupQuota(ctx, "g1", 0))
	if n, err := writeUp(filepath.Join(layer.Path, "d"), 12<<20); err != nil {
		t.Fatalf("the layer after its group was removed: %d bytes, %v", n, err)
	}
}

// cloneAcross: a copy from one volume into another with a quota escapes
// it exactly where Capabilities.CloneAcrossVolumes says so (btrfs: the
// reflink is charged to the volume that wrote the extent); elsewhere the
// quota stops it. The copy is copy_file_range, then writes where the
// kernel cannot copy between the two (as cp does).
func cloneAcross(t *testing.T, p Pool) {
	if !p.Backend.Info().Capabilities.Quota {
		t.Skip("the backend enforces no quota for a copy to escape (Capabilities.Quota)")
	}
	fill(t, p.Project.Path)
	base := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, "b1", true))
	a := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "a1", false))
	b := ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, base, "a2", false))
	const size, limit = 16 << 20, 4 << 20
	if n, err := writeUp(filepath.Join(a.Path, "big"), size); err != nil {
		t.Fatalf("16 MiB into a volume: %d bytes, %v", n, err)
	}
	syncFS(t, a.Path)
	check(t, p.Backend.SetQuota(ctx, b, limit))
	src, err := os.Open(filepath.Join(a.Path, "big"))
	check(t, err)
	defer src.Close()
	dst, err := os.Create(filepath.Join(b.Path, "big"))
	check(t, err)
	copied, how := 0, "copy_file_range"
	var cerr error
	for copied < size {
		n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, size-copied, 0)
		if err == nil && n > 0 {
			copied += n
			continue
		}
		cerr = err
		if copied == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
			how = "writes (copy_file_range: " + err.Error() + ")"
			m, err := io.Copy(dst, src)
			copied, cerr = int(m), err
		}
		break
	}
	if err := dst.Sync(); cerr == nil {
		cerr = err
	}
	dst.Close()
	escaped := copied == size && cerr == nil
	t.Logf("a copy of 16 MiB into a volume with a 4 MiB quota, by %s: %d bytes went in (%v)", how, copied, cerr)
	if caps := p.Backend.Info().Capabilities; escaped != caps.CloneAcrossVolumes {
		t.Fatalf("a copy of 16 MiB into a volume with a 4 MiB quota went in whole: %v; CloneAcrossVolumes says %v", escaped, caps.CloneAcrossVolumes)
	}
}
