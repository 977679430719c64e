package sendstream_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

func TestDumpMatchesBtrfsReceiveDump(t *testing.T) {
	base, snap := volumes(t, "dump")
	streams := []struct {
		name    string
		stream  []byte
		subvols int
	}{
		{"full stream of the base", send(t, base), 1},
		{"full stream after the changes", send(t, snap), 1},
		{"full stream, no data", send(t, snap, "--no-data"), 1},
		{"incremental stream", send(t, snap, "-p", base), 1},
		{"incremental stream, no data", send(t, snap, "-p", base, "--no-data"), 1},
		// -e: one stream of two subvolumes (without it, two streams one after
		// the other, of which btrfs receive --dump prints the first).
		{"two snapshots in one stream", send(t, snap, "-e", "-c", base, base), 2},
	}
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			want := receiveDump(t, s.stream)
			var subvols int
			for _, line := range strings.Split(want, "\n") {
				if strings.HasPrefix(line, "subvol ") || strings.HasPrefix(line, "snapshot ") {
					subvols++
				}
			}
			if subvols != s.subvols || strings.Count(want, "\n") < 50 {
				t.Fatalf("btrfs receive --dump printed %d lines for %d subvolumes, want %d subvolumes and more lines:\n%s", strings.Count(want, "\n"), subvols, s.subvols, want)
			}
			sameLines(t, s.name, dump(t, s.stream), want)
		})
	}
}

// The incremental stream's commands come through with their values: every
// command type, and the attributes of the changes changeAll made.
func TestReaderDecodesARealStream(t *testing.T) {
	base, snap := volumes(t, "decode")
	r, err := sendstream.NewReader(bytes.NewReader(send(t, snap, "-p", base)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != 1 {
		t.Fatalf("Version() = %d, want 1", r.Version())
	}
	var cmds []*sendstream.Command
	for {
		c, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d commands: %v", len(cmds), err)
		}
		cmds = append(cmds, c)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end: %v, want io.EOF again", err)
	}
	types := make(map[sendstream.CommandType]bool)
	for _, c := range cmds {
		types[c.Type] = true
	}
	// All but subvol (a full stream's) and update_extent (--no-data's).
	for typ := sendstream.CmdSnapshot; typ <= sendstream.CmdEnd; typ++ {
		if !types[typ] {
			t.Errorf("no %s command in the stream", typ)
		}
	}

	has := func(what string, match func(c *sendstream.Command) bool) {
		t.Helper()
		if !slices.ContainsFunc(cmds, match) {
			t.Errorf("no %s in the stream", what)
		}
	}
	has("write of the 4 KiB at 128 KiB in big.bin", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdWrite && c.Path == "big.bin" && c.FileOffset == 128<<10 && bytes.Equal(c.Data, random(5, 4096))
	})
	has("symlink to a.txt", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdSymlink && c.PathLink == "a.txt"
	})
	has("mknod of a character device 1:3", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdMknod && c.Mode == syscall.S_IFCHR|0o600 && c.Rdev == 0x103
	})
	has("mknod of a block device 259:300000", func(c *sendstream.Command) bool {
		// The kernel's new_encode_dev, as glibc's makedev for these.
		return c.Type == sendstream.CmdMknod && c.Mode == syscall.S_IFBLK|0o640 && c.Rdev == 0x493103e0
	})
	has("chown of own.txt to 1000:1001", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdChown && c.Path == "own.txt" && c.UID == 1000 && c.GID == 1001
	})
	has("chmod of mode.txt to 0600", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdChmod && c.Path == "mode.txt" && c.Mode == 0o600
	})
	has("clone of big.bin's 256 KiB to clone.bin", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdClone && c.Path == "clone.bin" && c.ClonePath == "big.bin" && c.CloneLen == 256<<10
	})
	has("set_xattr user.new = new value", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdSetXattr && c.XattrName == "user.new" && string(c.XattrData) == "new value"
	})
	has("truncate of shrink.txt to 100", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdTruncate && c.Path == "shrink.txt" && c.Size == 100
	})
	has("rename of d to d2", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdRename && c.Path == "d" && c.PathTo == "d2"
	})
	has("utimes of new.txt within the last hour", func(c *sendstream.Command) bool {
		return c.Type == sendstream.CmdUtimes && c.Path == "new.txt" && time.Since(c.MTime).Abs() < time.Hour && !c.ATime.IsZero() && !c.CTime.IsZero()
	})
}

func TestChangesOfAnIncrementalStream(t *testing.T) {
	base, snap := volumes(t, "changes")
	want := []cowfs.Change{
		{Path: "big.bin", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "blk", Kind: cowfs.Added, Type: cowfs.TypeDevice},
		{Path: "caf\u00e9.txt", Kind: cowfs.Metadata},
		{Path: "chr", Kind: cowfs.Added, Type: cowfs.TypeDevice},
		{Path: "clone.bin", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "d", NewPath: "d2", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
		{Path: "d/y", Kind: cowfs.Deleted},
		{Path: "d2/sub/new", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "d2/x", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "fifo", Kind: cowfs.Added, Type: cowfs.TypeFIFO},
		{Path: "grow.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "hl", Kind: cowfs.Added},
		{Path: "link", Kind: cowfs.Added, Type: cowfs.TypeSymlink},
		{Path: "mode.txt", Kind: cowfs.Metadata},
		{Path: "mv.txt", NewPath: "newdir/mv.txt", Kind: cowfs.Renamed},
		{Path: "new.txt", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "newdir", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "newdir/f", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "old.txt", Kind: cowfs.Deleted},
		{Path: "own.txt", Kind: cowfs.Metadata},
		{Path: "ren.txt", NewPath: "renamed.txt", Kind: cowfs.Renamed},
		{Path: "renmod.txt", NewPath: "renmod2.txt", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "renmod2.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "replace.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "shrink.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "sock", Kind: cowfs.Added, Type: cowfs.TypeSocket},
		{Path: "sparse.bin", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "tab\tname", NewPath: "new\nline", Kind: cowfs.Renamed},
		{Path: "tree", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "tree/a", Kind: cowfs.Deleted},
		{Path: "tree/b", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "tree/b/c", Kind: cowfs.Deleted},
		{Path: "with space.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "xattr.txt", Kind: cowfs.Metadata},
	}
	for name, args := range map[string][]string{"with data": {"-p", base}, "no data": {"-p", base, "--no-data"}} {
		t.Run(name, func(t *testing.T) {
			got, err := sendstream.Changes(bytes.NewReader(send(t, snap, args...)))
			if err != nil {
				t.Fatal(err)
			}
			sameChanges(t, got, want)
		})
	}
}

// A full stream is everything added: each path of the snapshot, with the
// type lstat gives it.
func TestChangesOfAFullStreamListEveryPath(t *testing.T) {
	_, snap := volumes(t, "full")
	var want []cowfs.Change
	err := filepath.WalkDir(snap, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == snap {
			return err
		}
		rel, _ := filepath.Rel(snap, path)
		want = append(want, cowfs.Change{Path: rel, Kind: cowfs.Added, Type: fileType(d.Type())})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(a, b cowfs.Change) int { return strings.Compare(a.Path, b.Path) })
	got, err := sendstream.Changes(bytes.NewReader(send(t, snap, "--no-data")))
	if err != nil {
		t.Fatal(err)
	}
	// hl and a.txt are one inode: a link of a new file is a new file.
	sameChanges(t, got, want)
}

func fileType(m fs.FileMode) cowfs.FileType {
	switch {
	case m.IsDir():
		return cowfs.TypeDir
	case m&fs.ModeSymlink != 0:
		return cowfs.TypeSymlink
	case m&fs.ModeNamedPipe != 0:
		return cowfs.TypeFIFO
	case m&fs.ModeSocket != 0:
		return cowfs.TypeSocket
	case m&fs.ModeDevice != 0:
		return cowfs.TypeDevice
	case m.IsRegular():
		return cowfs.TypeFile
	}
	return cowfs.TypeUnknown
}

func sameChanges(t *testing.T, got, want []cowfs.Change) {
	t.Helper()
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			t.Fatalf("change %d: missing %+v", i, want[i])
		case i >= len(want):
			t.Fatalf("change %d: unexpected %+v", i, got[i])
		case got[i] != want[i]:
			t.Fatalf("change %d: got %+v, want %+v\nall: %+v", i, got[i], want[i], got)
		}
	}
}

// A stream cut anywhere is corrupt, never a panic and never a clean end.
func TestTruncatedStreamIsCorruptAtEveryByte(t *testing.T) {
	base, snap := volumes(t, "cut")
	for name, stream := range map[string][]byte{
		"incremental": send(t, snap, "-p", base, "--no-data"),
		"full":        send(t, snap, "--no-data"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := readAll(stream); err != nil {
				t.Fatalf("the whole stream: %v", err)
			}
			for n := range len(stream) {
				err := readAll(stream[:n])
				if !errors.Is(err, cowfs.ErrCorruptStream) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("cut after %d of %d bytes: %v; want a corrupt, truncated stream", n, len(stream), err)
				}
			}
			if _, err := sendstream.Changes(bytes.NewReader(stream[:len(stream)-1])); !errors.Is(err, cowfs.ErrCorruptStream) {
				t.Fatalf("Changes of a stream missing its last byte: %v, want a corrupt stream", err)
			}
		})
	}
}

// Every single byte changed anywhere in a stream is caught: by the magic,
// the version or a command's crc32c.
func TestEveryFlippedByteIsCaught(t *testing.T) {
	base, snap := volumes(t, "flip")
	stream := send(t, snap, "-p", base, "--no-data")
	for i := range stream {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x55
		err := readAll(bad)
		if !errors.Is(err, cowfs.ErrCorruptStream) {
			t.Fatalf("byte %d flipped: %v, want a corrupt stream", i, err)
		}
		// Past the header, a change is a checksum mismatch, or a length
		// that now runs past the end.
		if i >= 17 && !strings.Contains(err.Error(), "crc32c mismatch") && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "over the") {
			t.Fatalf("byte %d flipped: %v; want a crc32c mismatch", i, err)
		}
	}
	bad := bytes.Clone(stream)
	bad[17+10] ^= 1 // in the first command's payload
	err := readAll(bad)
	if err == nil || !strings.Contains(err.Error(), "command 1 (snapshot) at byte 17: crc32c mismatch") {
		t.Fatalf("payload of command 1 flipped: %v; want it named with its offset", err)
	}
}

func TestBadHeaders(t *testing.T) {
	_, snap := volumes(t, "hdr")
	v1 := send(t, snap, "--no-data")
	v2 := run(t, nil, "btrfs", "send", "-q", "--proto", "2", "--no-data", snap)
	badMagic := bytes.Clone(v1)
	copy(badMagic, "btrfs-strean")
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"empty", "", "header is truncated: 0 of 17 bytes"},
		{"bad magic", string(badMagic), `bad magic "btrfs-strean\x00" at byte 0`},
		{"not a stream", "hello, world, not a stream", "bad magic"},
		{"version 2 from btrfs send --proto 2", string(v2), "send stream version 2 at byte 13 is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sendstream.NewReader(strings.NewReader(tc.stream))
			if !errors.Is(err, cowfs.ErrCorruptStream) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewReader: %v; want a corrupt stream error saying %q", err, tc.want)
			}
			if _, err := sendstream.Changes(strings.NewReader(tc.stream)); !errors.Is(err, cowfs.ErrCorruptStream) {
				t.Fatalf("Changes: %v; want a corrupt stream error", err)
			}
		})
	}
}

// readAll reads stream to its end, dumping each command as it goes.
func readAll(stream []byte) error {
	r, err := sendstream.NewReader(bytes.NewReader(stream))
	if err != nil {
		return err
	}
	d := sendstream.NewDumper(io.Discard)
	for {
		c, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := d.Dump(c); err != nil {
			return err
		}
	}
}
