package sendstream_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// Command and attribute numbers of the kernel's fs/btrfs/send.h, written
// out again so that the tests check the package's numbering.
const (
	cSubvol, cSnapshot, cMkfile, cMkdir, cMknod, cMkfifo, cMksock, cSymlink = 1, 2, 3, 4, 5, 6, 7, 8
	cRename, cLink, cUnlink, cRmdir, cSetXattr, cRemoveXattr, cWrite        = 9, 10, 11, 12, 13, 14, 15
	cClone, cTruncate, cChmod, cChown, cUtimes, cEnd, cUpdateExtent         = 16, 17, 18, 19, 20, 21, 22

	aUUID, aCTransID, aIno, aSize, aMode, aUID, aGID, aRdev           = 1, 2, 3, 4, 5, 6, 7, 8
	aCTime, aMTime, aATime, aOTime, aXattrName, aXattrData, aPath     = 9, 10, 11, 12, 13, 14, 15
	aPathTo, aPathLink, aFileOffset, aData, aCloneUUID                = 16, 17, 18, 19, 20
	aCloneCTransID, aClonePath, aCloneOffset, aCloneLen, aFirstUnused = 21, 22, 23, 24, 25
)

type tlv struct {
	typ uint16
	val []byte
}

func str(typ uint16, s string) tlv { return tlv{typ, []byte(s)} }

func u64(typ uint16, v uint64) tlv { return tlv{typ, binary.LittleEndian.AppendUint64(nil, v)} }

func uuid(typ uint16, b byte) tlv { return tlv{typ, bytes.Repeat([]byte{b}, 16)} }

func timespec(typ uint16, sec int64, nsec uint32) tlv {
	v := binary.LittleEndian.AppendUint64(nil, uint64(sec))
	return tlv{typ, binary.LittleEndian.AppendUint32(v, nsec)}
}

// crc32c is btrfs's checksum written out bit by bit: Castagnoli's
// polynomial, reflected, seed 0 and no final inversion.
func crc32c(data []byte) uint32 {
	var crc uint32
	for _, b := range data {
		crc ^= uint32(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
	}
	return crc
}

// command encodes a command with a correct checksum.
func command(cmd uint16, attrs ...tlv) []byte {
	var payload []byte
	for _, a := range attrs {
		payload = binary.LittleEndian.AppendUint16(payload, a.typ)
		payload = binary.LittleEndian.AppendUint16(payload, uint16(len(a.val)))
		payload = append(payload, a.val...)
	}
	return rawCommand(uint32(len(payload)), cmd, payload)
}

// rawCommand encodes a command whose length field may lie.
func rawCommand(length uint32, cmd uint16, payload []byte) []byte {
	c := binary.LittleEndian.AppendUint32(nil, length)
	c = binary.LittleEndian.AppendUint16(c, cmd)
	c = append(c, 0, 0, 0, 0)
	c = append(c, payload...)
	binary.LittleEndian.PutUint32(c[6:], crc32c(c))
	return c
}

func stream(cmds ...[]byte) []byte {
	s := append([]byte("btrfs-stream\x00"), 1, 0, 0, 0)
	for _, c := range cmds {
		s = append(s, c...)
	}
	return s
}

var subvolCmd = command(cSubvol, str(aPath, "vol"), uuid(aUUID, 0xab), u64(aCTransID, 7))

// Odd values btrfs-progs prints in its own ways: escapes in paths and link
// targets, xattr data cut at a NUL, a clone length that overflows an int,
// times before 1970 and after 9999, long paths, a second subvolume.
func TestDumpOfOddValuesMatchesBtrfsReceiveDump(t *testing.T) {
	s := stream(
		subvolCmd,
		command(cMkfile, str(aPath, "ctl\a\b\x1b\f\r\v\x01\x7f\x80\xff end"), u64(aIno, 300)),
		command(cSymlink, str(aPath, "s"), u64(aIno, 301), str(aPathLink, "to/ spaced\ttab\\")),
		command(cSetXattr, str(aPath, "f"), str(aXattrName, "user.bin"), str(aXattrData, "ab\x00cd")),
		command(cSetXattr, str(aPath, "f"), str(aXattrName, "user.a b"), str(aXattrData, "x y\n")),
		command(cRemoveXattr, str(aPath, "f"), str(aXattrName, "user.a b")),
		command(cClone, str(aPath, "c"), u64(aFileOffset, 8192), u64(aCloneLen, 3<<30), uuid(aCloneUUID, 1),
			u64(aCloneCTransID, 5), str(aClonePath, "src file"), u64(aCloneOffset, 4096)),
		command(cUtimes, str(aPath, "t"), timespec(aATime, -1, 0), timespec(aMTime, 253402300800, 999999999), timespec(aCTime, 0, 1),
			timespec(aOTime, 5, 0)), // never sent by the kernel, ignored by btrfs-progs
		command(cWrite, str(aPath, "dir/"), u64(aFileOffset, 5), str(aData, "hi")),
		command(cMknod, str(aPath, "n"), u64(aIno, 302), u64(aMode, 0o60600), u64(aRdev, 1<<64-1)),
		command(cChmod, str(aPath, "n"), u64(aMode, 0o7777)),
		command(cChown, str(aPath, "n"), u64(aUID, 1<<32-1), u64(aGID, 0)),
		command(cTruncate, str(aPath, strings.Repeat("long/", 8)+"end"), u64(aSize, 1<<63)),
		command(cUpdateExtent, str(aPath, "exactly-the-32-columns-pad-to"), u64(aFileOffset, 1), u64(aSize, 2)),
		command(cRename, str(aPath, "a b"), str(aPathTo, "c\nd")),
		command(cLink, str(aPath, "l"), str(aPathLink, "a b")),
		command(cMkfifo, str(aPath, "fifo"), u64(aIno, 303)),
		command(cMksock, str(aPath, "sock"), u64(aIno, 304)),
		command(cUnlink, str(aPath, "l")),
		command(cRmdir, str(aPath, "")),
		command(cSnapshot, str(aPath, "snap 2/"), uuid(aUUID, 2), u64(aCTransID, 9), uuid(aCloneUUID, 3), u64(aCloneCTransID, 8)),
		command(cMkdir, str(aPath, "d"), u64(aIno, 305)),
		command(cEnd),
	)
	sameLines(t, "odd values", dump(t, s), receiveDump(t, s))

	// Times are local: a zone west of UTC, with half hours.
	loc, err := time.LoadLocation("America/St_Johns")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TZ", "America/St_Johns")
	local := time.Local
	time.Local = loc
	defer func() { time.Local = local }()
	sameLines(t, "odd values in America/St_Johns", dump(t, s), receiveDump(t, s))
}

func TestCorruptCommandsSayWhatAndWhere(t *testing.T) {
	write := func(attrs ...tlv) []byte {
		return command(cWrite, append([]tlv{str(aPath, "f"), u64(aFileOffset, 0)}, attrs...)...)
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"unknown command", stream(subvolCmd, command(23, str(aPath, "f"))),
			"command 2 (command(23)) at byte 66: unknown command type 23"},
		{"command zero", stream(command(0)), "command 1 (command(0)) at byte 17: unknown command type 0"},
		{"unknown attribute", stream(subvolCmd, command(cUnlink, str(aPath, "f"), u64(aFirstUnused, 1))),
			"command 2 (unlink) at byte 66: unknown attribute type 25 at byte 81"},
		{"attribute type zero", stream(command(cUnlink, str(0, "f"))), "unknown attribute type 0 at byte 27"},
		{"attribute overruns", stream(rawCommand(8, cUnlink, []byte{aPath, 0, 100, 0, 'a', 'b', 'c', 'd'})),
			"command 1 (unlink) at byte 17: attribute path at byte 27 is 100 bytes long, overrunning the command by 96"},
		{"attribute header overruns", stream(rawCommand(6, cUnlink, []byte{aPath, 0, 0, 0, aPath, 0})),
			"attribute header at byte 31 overruns the command: 2 bytes left"},
		{"u64 of 4 bytes", stream(command(cSubvol, str(aPath, "v"), uuid(aUUID, 1), tlv{aCTransID, []byte{1, 2, 3, 4}})),
			"attribute ctransid at byte 52: 4 bytes, want 8"},
		{"uuid of 15 bytes", stream(command(cSubvol, str(aPath, "v"), tlv{aUUID, make([]byte, 15)}, u64(aCTransID, 1))),
			"attribute uuid at byte 32: 15 bytes, want 16"},
		{"timespec of 8 bytes", stream(command(cUtimes, str(aPath, "v"), u64(aATime, 1))), "attribute atime at byte 32: 8 bytes, want 12"},
		{"nanoseconds over a second", stream(command(cUtimes, str(aPath, "v"), timespec(aATime, 1, 1e9))), "nanoseconds 1000000000 out of range"},
		{"missing attribute", stream(subvolCmd, write()), "command 2 (write) at byte 66: attribute data is missing"},
		{"attribute twice", stream(subvolCmd, write(str(aData, "x"), str(aData, "y"))), "attribute data at byte 98 appears twice"},
		{"length over the cap", stream(rawCommand(1<<30, cWrite, nil)), "payload length 1073741824 is over the 262144 bytes"},
		{"no end command", stream(subvolCmd), "command 2 at byte 66: the stream ends without an end command"},
		{"crc mismatch", append(stream(subvolCmd[:len(subvolCmd)-1]), 'x'), "command 1 (subvol) at byte 17: crc32c mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := readAll(tc.stream)
			if !errors.Is(err, cowfs.ErrCorruptStream) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reading: %v\nwant a corrupt stream error saying %q", err, tc.want)
			}
		})
	}
	// The second command starts after the header (17) and subvolCmd.
	if second := 17 + len(subvolCmd); second != 66 {
		t.Fatalf("the second command starts at byte %d; the cases above say 66", second)
	}
}

// The reader stops at the end command: what follows is left for the next
// reader (btrfs receive reads streams one after another).
func TestReaderStopsAtTheEndCommand(t *testing.T) {
	rest := stream(subvolCmd, command(cEnd))
	in := bytes.NewReader(append(stream(subvolCmd, command(cEnd)), rest...))
	for i := range 2 {
		r, err := sendstream.NewReader(in)
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		var types []string
		for {
			c, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("stream %d: %v", i+1, err)
			}
			types = append(types, c.Type.String())
		}
		if got := strings.Join(types, " "); got != "subvol end" {
			t.Fatalf("stream %d: commands %q, want \"subvol end\"", i+1, got)
		}
	}
	if in.Len() != 0 {
		t.Fatalf("%d bytes left after both streams", in.Len())
	}
}

func TestCommandData(t *testing.T) {
	s := stream(subvolCmd,
		command(cWrite, str(aPath, "f"), u64(aFileOffset, 4096), str(aData, "first")),
		command(cWrite, str(aPath, "f"), u64(aFileOffset, 8192), str(aData, "second")),
		command(cEnd))
	r, err := sendstream.NewReader(bytes.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*sendstream.Command
	for {
		c, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	// Data stays valid after later calls to Next.
	if len(cmds) != 4 || string(cmds[1].Data) != "first" || string(cmds[2].Data) != "second" || cmds[1].FileOffset != 4096 {
		t.Fatalf("commands %+v; want the writes' data intact", cmds)
	}
	if cmds[0].UUID.String() != "abababab-abab-abab-abab-abababababab" || cmds[0].CTransID != 7 || cmds[0].Path != "vol" {
		t.Fatalf("subvol %+v", cmds[0])
	}
	if cmds[2].Offset != int64(17+len(subvolCmd)+len(command(cWrite, str(aPath, "f"), u64(aFileOffset, 4096), str(aData, "first")))) {
		t.Fatalf("the third command's Offset is %d", cmds[2].Offset)
	}
}

func TestChangesErrors(t *testing.T) {
	snapshotCmd := command(cSnapshot, str(aPath, "s"), uuid(aUUID, 2), u64(aCTransID, 9), uuid(aCloneUUID, 3), u64(aCloneCTransID, 8))
	for _, tc := range []struct {
		name   string
		stream []byte
		want   error
		says   string
	}{
		{"two subvolumes", stream(subvolCmd, snapshotCmd, command(cEnd)), cowfs.ErrUnsupported,
			"command 2 (snapshot) at byte 66: a stream of more than one subvolume: "},
		{"a path in a new directory that was never made", stream(snapshotCmd,
			command(cMkdir, str(aPath, "o257-1-0"), u64(aIno, 257)),
			command(cUnlink, str(aPath, "o257-1-0/x")), command(cEnd)), cowfs.ErrCorruptStream,
			`command 3 (unlink) at byte 130: corrupt send stream: no entry "o257-1-0/x"`},
		{"a path in a full stream that was never made", stream(subvolCmd, command(cChmod, str(aPath, "x"), u64(aMode, 0o644)), command(cEnd)),
			cowfs.ErrCorruptStream, `no entry "x"`},
		{"renaming the root", stream(snapshotCmd, command(cRename, str(aPath, ""), str(aPathTo, "x")), command(cEnd)),
			cowfs.ErrCorruptStream, "renaming the root"},
		{"a name moved away, used again", stream(snapshotCmd,
			command(cRename, str(aPath, "a"), str(aPathTo, "b")),
			command(cUnlink, str(aPath, "a")), command(cEnd)), cowfs.ErrCorruptStream, `no entry "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sendstream.Changes(bytes.NewReader(tc.stream))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Changes: %v\nwant %v saying %q", err, tc.want, tc.says)
			}
		})
	}
}
