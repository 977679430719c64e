// Package sendstream reads btrfs send streams of version 1, the format
// `btrfs send` writes: each command as a typed value (Reader), a line per
// command exactly as `btrfs receive --dump` prints it (Dumper), and the paths
// an incremental stream changes (Changes), which is how sandboxd diffs a
// sandbox against its base on btrfs.
//
// It exists because the parser in github.com/dennwc/btrfs stops at the first
// symlink and drops the rdev of device nodes.
//
// The format is defined by the kernel's fs/btrfs/send.h. A stream is a
// header (the magic "btrfs-stream\0" and a le32 version), then commands:
// a le32 payload length, a le16 command type, a le32 crc32c of the command
// (its header with the crc field zeroed, then its payload), and a payload of
// attributes, each a le16 type, a le16 length and that many bytes.
package sendstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

const (
	magic        = "btrfs-stream\x00"
	headerLen    = len(magic) + 4 // magic, le32 version
	cmdHeaderLen = 10             // le32 len, le16 cmd, le32 crc
	tlvHeaderLen = 4              // le16 type, le16 len
)

// MaxCommandLen is the largest command payload a Reader accepts. The kernel
// builds a version 1 command in a 64 KiB buffer; the cap leaves room for
// other writers while a corrupt length can never make a Reader allocate
// more than this.
const MaxCommandLen = 256 << 10

// CommandType is a send stream command.
type CommandType uint16

// The commands of version 1, numbered as in the kernel's send.h.
const (
	CmdSubvol CommandType = iota + 1
	CmdSnapshot
	CmdMkfile
	CmdMkdir
	CmdMknod
	CmdMkfifo
	CmdMksock
	CmdSymlink
	CmdRename
	CmdLink
	CmdUnlink
	CmdRmdir
	CmdSetXattr
	CmdRemoveXattr
	CmdWrite
	CmdClone
	CmdTruncate
	CmdChmod
	CmdChown
	CmdUtimes
	CmdEnd
	CmdUpdateExtent
)

var commandNames = [...]string{
	CmdSubvol:       "subvol",
	CmdSnapshot:     "snapshot",
	CmdMkfile:       "mkfile",
	CmdMkdir:        "mkdir",
	CmdMknod:        "mknod",
	CmdMkfifo:       "mkfifo",
	CmdMksock:       "mksock",
	CmdSymlink:      "symlink",
	CmdRename:       "rename",
	CmdLink:         "link",
	CmdUnlink:       "unlink",
	CmdRmdir:        "rmdir",
	CmdSetXattr:     "set_xattr",
	CmdRemoveXattr:  "remove_xattr",
	CmdWrite:        "write",
	CmdClone:        "clone",
	CmdTruncate:     "truncate",
	CmdChmod:        "chmod",
	CmdChown:        "chown",
	CmdUtimes:       "utimes",
	CmdEnd:          "end",
	CmdUpdateExtent: "update_extent",
}

// String is the command's name as btrfs-progs prints it ("mkfile",
// "set_xattr", ...).
func (t CommandType) String() string {
	if t.known() {
		return commandNames[t]
	}
	return fmt.Sprintf("command(%d)", uint16(t))
}

func (t CommandType) known() bool { return t >= CmdSubvol && t <= CmdUpdateExtent }

// attr is an attribute type, numbered as in the kernel's send.h.
type attr uint16

const (
	attrUUID attr = iota + 1
	attrCTransID
	attrIno
	attrSize
	attrMode
	attrUID
	attrGID
	attrRdev
	attrCTime
	attrMTime
	attrATime
	attrOTime
	attrXattrName
	attrXattrData
	attrPath
	attrPathTo
	attrPathLink
	attrFileOffset
	attrData
	attrCloneUUID
	attrCloneCTransID
	attrClonePath
	attrCloneOffset
	attrCloneLen
	attrMax = attrCloneLen
)

var attrNames = [...]string{
	attrUUID:          "uuid",
	attrCTransID:      "ctransid",
	attrIno:           "ino",
	attrSize:          "size",
	attrMode:          "mode",
	attrUID:           "uid",
	attrGID:           "gid",
	attrRdev:          "rdev",
	attrCTime:         "ctime",
	attrMTime:         "mtime",
	attrATime:         "atime",
	attrOTime:         "otime",
	attrXattrName:     "xattr_name",
	attrXattrData:     "xattr_data",
	attrPath:          "path",
	attrPathTo:        "path_to",
	attrPathLink:      "path_link",
	attrFileOffset:    "file_offset",
	attrData:          "data",
	attrCloneUUID:     "clone_uuid",
	attrCloneCTransID: "clone_ctransid",
	attrClonePath:     "clone_path",
	attrCloneOffset:   "clone_offset",
	attrCloneLen:      "clone_len",
}

func (a attr) String() string { return attrNames[a] }

// required lists the attributes btrfs-progs needs for each command; a
// command without one of them is corrupt.
var required = [...][]attr{
	CmdSubvol:       {attrPath, attrUUID, attrCTransID},
	CmdSnapshot:     {attrPath, attrUUID, attrCTransID, attrCloneUUID, attrCloneCTransID},
	CmdMkfile:       {attrPath, attrIno},
	CmdMkdir:        {attrPath, attrIno},
	CmdMknod:        {attrPath, attrIno, attrMode, attrRdev},
	CmdMkfifo:       {attrPath, attrIno},
	CmdMksock:       {attrPath, attrIno},
	CmdSymlink:      {attrPath, attrIno, attrPathLink},
	CmdRename:       {attrPath, attrPathTo},
	CmdLink:         {attrPath, attrPathLink},
	CmdUnlink:       {attrPath},
	CmdRmdir:        {attrPath},
	CmdSetXattr:     {attrPath, attrXattrName, attrXattrData},
	CmdRemoveXattr:  {attrPath, attrXattrName},
	CmdWrite:        {attrPath, attrFileOffset, attrData},
	CmdClone:        {attrPath, attrFileOffset, attrCloneLen, attrCloneUUID, attrCloneCTransID, attrClonePath, attrCloneOffset},
	CmdTruncate:     {attrPath, attrSize},
	CmdChmod:        {attrPath, attrMode},
	CmdChown:        {attrPath, attrUID, attrGID},
	CmdUtimes:       {attrPath, attrATime, attrMTime, attrCTime},
	CmdEnd:          {},
	CmdUpdateExtent: {attrPath, attrFileOffset, attrSize},
}

// UUID is a subvolume's UUID.
type UUID [16]byte

// String formats u the way uuid_unparse does: 8-4-4-4-12 lowercase hex.
func (u UUID) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Command is one command of a stream. The attributes its type requires are
// always set; the others are zero unless the stream carried them.
type Command struct {
	Type CommandType
	// Offset is where the command starts in the stream, in bytes.
	Offset int64

	// Path is what the command acts on, relative to the subvolume's root
	// (for subvol and snapshot: the subvolume's own name).
	Path string
	// PathTo is rename's new path.
	PathTo string
	// PathLink is a symlink's target, or for link the existing path the
	// new name Path links to.
	PathLink string

	// UUID and CTransID identify the subvolume (subvol, snapshot).
	UUID     UUID
	CTransID uint64
	Ino      uint64
	// Size is truncate's new size, or update_extent's length.
	Size uint64
	Mode uint64
	UID  uint64
	GID  uint64
	// Rdev is a device node's device number, in the kernel's new_encode_dev
	// format (what stat's st_rdev holds on Linux).
	Rdev                       uint64
	ATime, MTime, CTime, OTime time.Time

	XattrName string
	XattrData []byte

	// FileOffset is where write, clone and update_extent act in the file.
	FileOffset uint64
	// Data is what write writes. Data and XattrData belong to this command
	// alone: a Reader never reuses their memory.
	Data []byte

	// CloneUUID and CloneCTransID identify the subvolume a clone reads from,
	// or a snapshot's parent. ClonePath is a path in that subvolume (often
	// the parent snapshot, where names are as they were, not as the stream
	// has renamed them).
	CloneUUID     UUID
	CloneCTransID uint64
	ClonePath     string
	CloneOffset   uint64
	CloneLen      uint64
}

// crcTable is crc32c (Castagnoli), the checksum btrfs uses.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Reader reads the commands of a send stream. It reads no further than the
// end command, so a stream that follows on the same io.Reader can be read
// with another NewReader.
type Reader struct {
	r       io.Reader
	version uint32
	off     int64 // bytes read so far
	n       int   // commands read so far
	err     error // sticky: the first error, or io.EOF after the end command
}

// NewReader reads and checks the stream header. It accepts version 1 only.
func NewReader(r io.Reader) (*Reader, error) {
	var hdr [headerLen]byte
	n, err := io.ReadFull(r, hdr[:])
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: the header is truncated: %d of %d bytes: %w", cowfs.ErrCorruptStream, n, headerLen, io.ErrUnexpectedEOF)
	case err != nil:
		return nil, fmt.Errorf("reading the send stream header: %w", err)
	}
	if string(hdr[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: bad magic %q at byte 0 (want %q): not a btrfs send stream", cowfs.ErrCorruptStream, hdr[:len(magic)], magic)
	}
	v := binary.LittleEndian.Uint32(hdr[len(magic):])
	if v != 1 {
		return nil, fmt.Errorf("%w: send stream version %d at byte %d is not supported: only version 1 is (`btrfs send --proto 1` writes it)", cowfs.ErrCorruptStream, v, len(magic))
	}
	return &Reader{r: r, version: v, off: int64(headerLen)}, nil
}

// Version is the stream's format version (always 1).
func (r *Reader) Version() uint32 { return r.version }

// Next returns the next command. After the end command it returns io.EOF.
// Any other error wraps cowfs.ErrCorruptStream (or is the underlying
// reader's error) and says which command, at which byte, was wrong; it is
// returned again by every later call.
func (r *Reader) Next() (*Command, error) {
	if r.err != nil {
		return nil, r.err
	}
	c, err := r.next()
	if err != nil {
		r.err = err
		return nil, err
	}
	if c.Type == CmdEnd {
		r.err = io.EOF
	}
	return c, nil
}

// cmdError describes what is wrong with the command at start.
type cmdError struct {
	n     int
	typ   CommandType
	typed bool // typ was read
	start int64
}

func (e cmdError) errorf(format string, args ...any) error {
	what := fmt.Sprintf("command %d", e.n)
	if e.typed {
		what += " (" + e.typ.String() + ")"
	}
	return fmt.Errorf("%w: %s at byte %d: "+format, append([]any{cowfs.ErrCorruptStream, what, e.start}, args...)...)
}

func (r *Reader) next() (*Command, error) {
	r.n++
	ce := cmdError{n: r.n, start: r.off}
	var hdr [cmdHeaderLen]byte
	if n, err := io.ReadFull(r.r, hdr[:]); err != nil {
		r.off += int64(n)
		if errors.Is(err, io.EOF) {
			return nil, ce.errorf("the stream ends without an end command: %w", io.ErrUnexpectedEOF)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ce.errorf("the command header is truncated: %d of %d bytes: %w", n, cmdHeaderLen, err)
		}
		return nil, fmt.Errorf("reading command %d at byte %d of the send stream: %w", r.n, ce.start, err)
	}
	r.off += cmdHeaderLen
	length := binary.LittleEndian.Uint32(hdr[0:4])
	ce.typ, ce.typed = CommandType(binary.LittleEndian.Uint16(hdr[4:6])), true
	sum := binary.LittleEndian.Uint32(hdr[6:10])
	if length > MaxCommandLen {
		return nil, ce.errorf("payload length %d is over the %d bytes this reader accepts", length, MaxCommandLen)
	}

	payload := make([]byte, length)
	if n, err := io.ReadFull(r.r, payload); err != nil {
		r.off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ce.errorf("the payload is truncated: %d of %d bytes: %w", n, length, io.ErrUnexpectedEOF)
		}
		return nil, fmt.Errorf("reading command %d at byte %d of the send stream: %w", r.n, ce.start, err)
	}
	r.off += int64(length)

	// btrfs computes crc32c over the header with the crc field zeroed, then
	// the payload, with seed 0 and no final inversion; hash/crc32 inverts
	// on the way in and out, so the seed and the result are inverted here.
	clear(hdr[6:10])
	got := ^crc32.Update(crc32.Update(^uint32(0), crcTable, hdr[:]), crcTable, payload)
	if got != sum {
		return nil, ce.errorf("crc32c mismatch: the header says 0x%08x, the command's bytes give 0x%08x", sum, got)
	}
	if !ce.typ.known() {
		return nil, ce.errorf("unknown command type %d (version 1 has 1 to %d)", uint16(ce.typ), CmdUpdateExtent)
	}

	c := &Command{Type: ce.typ, Offset: ce.start}
	var seen uint32
	for pos := 0; pos < len(payload); {
		at := ce.start + cmdHeaderLen + int64(pos)
		if len(payload)-pos < tlvHeaderLen {
			return nil, ce.errorf("attribute header at byte %d overruns the command: %d bytes left", at, len(payload)-pos)
		}
		a := attr(binary.LittleEndian.Uint16(payload[pos:]))
		n := int(binary.LittleEndian.Uint16(payload[pos+2:]))
		pos += tlvHeaderLen
		if a == 0 || a > attrMax {
			return nil, ce.errorf("unknown attribute type %d at byte %d", uint16(a), at)
		}
		if n > len(payload)-pos {
			return nil, ce.errorf("attribute %s at byte %d is %d bytes long, overrunning the command by %d", a, at, n, n-(len(payload)-pos))
		}
		if seen&(1<<a) != 0 {
			return nil, ce.errorf("attribute %s at byte %d appears twice", a, at)
		}
		seen |= 1 << a
		if err := c.set(a, payload[pos:pos+n]); err != nil {
			return nil, ce.errorf("attribute %s at byte %d: %v", a, at, err)
		}
		pos += n
	}
	for _, a := range required[c.Type] {
		if seen&(1<<a) == 0 {
			return nil, ce.errorf("attribute %s is missing", a)
		}
	}
	return c, nil
}

// set decodes one attribute's value into c.
func (c *Command) set(a attr, v []byte) error {
	u64 := func(dst *uint64) error {
		if len(v) != 8 {
			return fmt.Errorf("%d bytes, want 8", len(v))
		}
		*dst = binary.LittleEndian.Uint64(v)
		return nil
	}
	uuid := func(dst *UUID) error {
		if len(v) != len(dst) {
			return fmt.Errorf("%d bytes, want %d", len(v), len(dst))
		}
		copy(dst[:], v)
		return nil
	}
	timespec := func(dst *time.Time) error {
		if len(v) != 12 {
			return fmt.Errorf("%d bytes, want 12", len(v))
		}
		sec := int64(binary.LittleEndian.Uint64(v))
		nsec := binary.LittleEndian.Uint32(v[8:])
		// A valid nsec keeps time.Unix from carrying into the seconds,
		// which Dump prints as the stream has them.
		if nsec >= 1e9 {
			return fmt.Errorf("nanoseconds %d out of range", nsec)
		}
		*dst = time.Unix(sec, int64(nsec))
		return nil
	}
	switch a {
	case attrUUID:
		return uuid(&c.UUID)
	case attrCTransID:
		return u64(&c.CTransID)
	case attrIno:
		return u64(&c.Ino)
	case attrSize:
		return u64(&c.Size)
	case attrMode:
		return u64(&c.Mode)
	case attrUID:
		return u64(&c.UID)
	case attrGID:
		return u64(&c.GID)
	case attrRdev:
		return u64(&c.Rdev)
	case attrCTime:
		return timespec(&c.CTime)
	case attrMTime:
		return timespec(&c.MTime)
	case attrATime:
		return timespec(&c.ATime)
	case attrOTime:
		return timespec(&c.OTime)
	case attrXattrName:
		c.XattrName = string(v)
	case attrXattrData:
		c.XattrData = v
	case attrPath:
		c.Path = string(v)
	case attrPathTo:
		c.PathTo = string(v)
	case attrPathLink:
		c.PathLink = string(v)
	case attrFileOffset:
		return u64(&c.FileOffset)
	case attrData:
		c.Data = v
	case attrCloneUUID:
		return uuid(&c.CloneUUID)
	case attrCloneCTransID:
		return u64(&c.CloneCTransID)
	case attrClonePath:
		c.ClonePath = string(v)
	case attrCloneOffset:
		return u64(&c.CloneOffset)
	case attrCloneLen:
		return u64(&c.CloneLen)
	}
	return nil
}

// Check reads a whole send stream, and says whether it is one: what a
// receive must see before it commits what it received.
func Check(r io.Reader) error {
	sr, err := NewReader(r)
	if err != nil {
		return err
	}
	for {
		if _, err := sr.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}
