package sendstream_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// FuzzReader feeds any bytes to the Reader, the Dumper and Changes: none may
// panic, and every error of a stream must wrap cowfs.ErrCorruptStream. Its
// seeds in testdata/fuzz/FuzzReader are small real streams (real-*) and
// what fuzzing found. Each input is read twice: as it is, and with its
// commands' checksums made right, so that mutations get past the checksum
// to the attributes and to Changes.
func FuzzReader(f *testing.F) {
	f.Add(stream(subvolCmd, command(cEnd)))
	// Paths no kernel writes, in an incremental stream (whose paths may
	// name what BASE holds).
	snapshotCmd := command(cSnapshot, str(aPath, "s"), uuid(aUUID, 2), u64(aCTransID, 9), uuid(aCloneUUID, 3), u64(aCloneCTransID, 8))
	for _, p := range []string{"../x", "a/../b", "a//b", "./a", "a/", "/a", "a\x00b", ".."} {
		f.Add(stream(snapshotCmd, command(cChmod, str(aPath, p), u64(aMode, 0o644)), command(cEnd)))
		f.Add(stream(snapshotCmd, command(cRename, str(aPath, "a"), str(aPathTo, p)), command(cEnd)))
		f.Add(stream(snapshotCmd, command(cUnlink, str(aPath, p)), command(cEnd)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
		check(t, fixChecksums(data))
	})
}

func check(t *testing.T, data []byte) {
	t.Helper()
	r, err := sendstream.NewReader(bytes.NewReader(data))
	if err == nil {
		d := sendstream.NewDumper(io.Discard)
		for {
			var c *sendstream.Command
			if c, err = r.Next(); err != nil {
				break
			}
			// Dump may refuse what btrfs-progs refuses too (a time
			// localtime cannot convert, a path over PATH_MAX).
			_ = d.Dump(c)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, cowfs.ErrCorruptStream) {
		t.Fatalf("reading: %v; want an error wrapping cowfs.ErrCorruptStream", err)
	}
	changes, err := sendstream.Changes(bytes.NewReader(data))
	if err != nil && !errors.Is(err, cowfs.ErrCorruptStream) && !errors.Is(err, cowfs.ErrUnsupported) {
		t.Fatalf("Changes: %v; want an error wrapping cowfs.ErrCorruptStream or ErrUnsupported", err)
	}
	if err == nil {
		checkChanges(t, changes)
	}
}

// checkChanges: what Changes lists is what Apply and the unified diff
// take: a known kind, a path that is "." (the root, whose metadata alone
// can change) or clean and relative with no "." or ".." element and no
// NUL; a new path for a rename alone; one entry a path.
func checkChanges(t *testing.T, changes []cowfs.Change) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range changes {
		switch c.Kind {
		case cowfs.Added, cowfs.Modified, cowfs.Deleted, cowfs.Metadata, cowfs.Renamed:
		default:
			t.Fatalf("Changes: %+v: unknown kind", c)
		}
		if c.Path == "." && c.Kind != cowfs.Metadata && c.Kind != cowfs.Modified {
			t.Fatalf("Changes: %+v: the root", c)
		}
		if (c.NewPath != "") != (c.Kind == cowfs.Renamed) {
			t.Fatalf("Changes: %+v: a new path is a rename's alone", c)
		}
		for _, p := range []string{c.Path, c.NewPath} {
			if p == "" || p == "." {
				continue
			}
			if path.IsAbs(p) || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 || slices.Contains(strings.Split(p, "/"), "..") {
				t.Fatalf("Changes: %+v: %q is not a clean relative path inside the tree", c, p)
			}
		}
		if seen[c.Path] {
			t.Fatalf("Changes: %s is listed twice", c.Path)
		}
		seen[c.Path] = true
	}
}

// fixChecksums returns a copy of data with the crc32c of each command that
// fits in it made right.
func fixChecksums(data []byte) []byte {
	data = bytes.Clone(data)
	for pos := 17; pos+10 <= len(data); {
		end := pos + 10 + int(binary.LittleEndian.Uint32(data[pos:]))
		if end > len(data) || end < pos {
			break
		}
		binary.LittleEndian.PutUint32(data[pos+6:], 0)
		binary.LittleEndian.PutUint32(data[pos+6:], crc32c(data[pos:end]))
		pos = end
	}
	return data
}

var updateSeeds = flag.Bool("update-seeds", false, "write FuzzReader's real-* seeds anew from streams of the testbed's btrfs")

const seedDir = "testdata/fuzz/FuzzReader"

// The real-* seeds are whole, valid streams that btrfs receive --dump
// prints as we do. `go test ./cowfs/sendstream/ -run TestFuzzSeeds
// -update-seeds` makes them again.
func TestFuzzSeedsAreRealStreams(t *testing.T) {
	if *updateSeeds {
		writeSeeds(t)
	}
	paths, err := filepath.Glob(filepath.Join(seedDir, "real-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 3 {
		t.Fatalf("%d real seeds in %s, want at least 3 (make them with -update-seeds)", len(paths), seedDir)
	}
	var total int
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		total += len(data)
		stream, err := unmarshalSeed(data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		sameLines(t, path, dump(t, stream), receiveDump(t, stream))
	}
	if total > 200<<10 {
		t.Fatalf("the real seeds take %d bytes; keep them under 200 KiB", total)
	}
}

// writeSeeds sends a small volume whole and incrementally, with and
// without data, into seed files.
func writeSeeds(t *testing.T) {
	vol := subvolume(t, "seed")
	f := files{t, vol}
	f.write("a", []byte("hi\n"))
	f.write("sp ace", []byte("space\n"))
	f.write("d/block", random(6, 8192))
	f.link("a", "d/h")
	f.symlink("a", "s")
	f.do(syscall.Mkfifo(f.path("p"), 0o600))
	f.mknod("c", syscall.S_IFCHR|0o600, 1, 3)
	f.mknod("sock", syscall.S_IFSOCK|0o600, 0, 0)
	f.setxattr("a", "user.x", "1")
	base := snapshot(t, vol, "seed-base")
	f.rename("a", "b")
	f.writeAt("d/h", 3, []byte("more\n"))
	f.reflink("d/block", "clone")
	f.remove("p")
	f.remove("sp ace")
	f.chmod("sock", 0o700)
	f.chown("c", 1, 2)
	f.truncate("d/block", 100)
	f.removexattr("b", "user.x")
	f.rename("d", "e")
	snap := snapshot(t, vol, "seed-snap")

	if err := os.MkdirAll(seedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, stream := range map[string][]byte{
		"real-full":               send(t, base),
		"real-incremental":        send(t, snap, "-p", base),
		"real-incremental-nodata": send(t, snap, "-p", base, "--no-data"),
	} {
		seed := "go test fuzz v1\n[]byte(" + strconv.Quote(string(stream)) + ")\n"
		if err := os.WriteFile(filepath.Join(seedDir, name), []byte(seed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// unmarshalSeed reads a seed file of one []byte, in go test's corpus format.
func unmarshalSeed(data []byte) ([]byte, error) {
	s, ok := strings.CutPrefix(string(data), "go test fuzz v1\n[]byte(")
	if !ok {
		return nil, errors.New("not a go test fuzz v1 file of one []byte")
	}
	s, ok = strings.CutSuffix(strings.TrimSpace(s), ")")
	if !ok {
		return nil, errors.New("no closing parenthesis")
	}
	v, err := strconv.Unquote(s)
	return []byte(v), err
}
