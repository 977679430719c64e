package sendstream

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// pathMax is Linux's PATH_MAX, the size of btrfs-progs' path buffers.
const pathMax = 4096

// Dumper prints commands the way `btrfs receive --dump` of btrfs-progs 6.2
// does, byte for byte: a title padded to 16 columns, the path prefixed with
// "./" and the current subvolume's name and escaped, then the command's
// fields aligned at column 48. Like btrfs-progs, it escapes the paths of
// symlink, link and rename but not clone's or xattrs, prints strings as C
// strings (up to a NUL byte) and times in the local time zone.
type Dumper struct {
	w io.Writer
	// subvol is btrfs-progs' full_subvol_path: "./" and the name of the
	// last subvol or snapshot command, which prefixes every path.
	subvol string
}

// NewDumper returns a Dumper writing to w.
func NewDumper(w io.Writer) *Dumper { return &Dumper{w: w, subvol: "."} }

// Dump writes c's line (nothing for the end command). It fails on a write
// error, and where btrfs-progs prints an error instead of a line: a path
// longer than PATH_MAX, or a time it cannot convert.
func (d *Dumper) Dump(c *Command) error {
	var line []byte
	var err error
	switch c.Type {
	case CmdSubvol, CmdSnapshot:
		subvol, err := pathCat(".", c.Path)
		if err != nil {
			return fmt.Errorf("dumping %s: %w", c.Type, err)
		}
		d.subvol = subvol
		fields := fmt.Sprintf("uuid=%s transid=%d", c.UUID, c.CTransID)
		if c.Type == CmdSnapshot {
			fields += fmt.Sprintf(" parent_uuid=%s parent_transid=%d", c.CloneUUID, c.CloneCTransID)
		}
		line = dumpLine(c.Type, subvol, fields)
	case CmdMkfile, CmdMkdir, CmdMkfifo, CmdMksock, CmdUnlink, CmdRmdir:
		line, err = d.line(c, "")
	case CmdMknod:
		line, err = d.line(c, "mode="+strconv.FormatUint(c.Mode, 8)+" dev=0x"+strconv.FormatUint(c.Rdev, 16))
	case CmdSymlink, CmdLink:
		line, err = d.line(c, string(appendEscaped([]byte("dest="), cString(c.PathLink))))
	case CmdRename:
		var to string
		if to, err = pathCat(d.subvol, c.PathTo); err == nil {
			line, err = d.line(c, string(appendEscaped([]byte("dest="), to)))
		}
	case CmdWrite:
		line, err = d.line(c, fmt.Sprintf("offset=%d len=%d", c.FileOffset, len(c.Data)))
	case CmdClone:
		var from string
		if from, err = pathCat(d.subvol, c.ClonePath); err == nil {
			// btrfs-progs reads the length into an int, so a length of
			// 2 GiB or more comes out sign-extended.
			n := uint64(int64(int32(c.CloneLen)))
			line, err = d.line(c, fmt.Sprintf("offset=%d len=%d from=%s clone_offset=%d", c.FileOffset, n, from, c.CloneOffset))
		}
	case CmdSetXattr:
		// "%.*s": the data up to its length or a NUL, whichever is first.
		data := c.XattrData
		if i := bytes.IndexByte(data, 0); i >= 0 {
			data = data[:i]
		}
		line, err = d.line(c, fmt.Sprintf("name=%s data=%s len=%d", cString(c.XattrName), data, len(c.XattrData)))
	case CmdRemoveXattr:
		line, err = d.line(c, "name="+cString(c.XattrName))
	case CmdTruncate:
		line, err = d.line(c, fmt.Sprintf("size=%d", c.Size))
	case CmdChmod:
		line, err = d.line(c, "mode="+strconv.FormatUint(c.Mode, 8))
	case CmdChown:
		line, err = d.line(c, fmt.Sprintf("gid=%d uid=%d", c.GID, c.UID))
	case CmdUtimes:
		var at, mt, ct string
		if at, err = strftime(c.ATime); err == nil {
			if mt, err = strftime(c.MTime); err == nil {
				if ct, err = strftime(c.CTime); err == nil {
					line, err = d.line(c, "atime="+at+" mtime="+mt+" ctime="+ct)
				}
			}
		}
	case CmdUpdateExtent:
		line, err = d.line(c, fmt.Sprintf("offset=%d len=%d", c.FileOffset, c.Size))
	case CmdEnd:
		return nil
	default:
		return fmt.Errorf("dumping %s: not a version 1 command", c.Type)
	}
	if err != nil {
		return fmt.Errorf("dumping %s of %q: %w", c.Type, c.Path, err)
	}
	if _, err := d.w.Write(line); err != nil {
		return fmt.Errorf("dumping %s of %q: %w", c.Type, c.Path, err)
	}
	return nil
}

// line is c's line: its path under the current subvolume, then fields.
func (d *Dumper) line(c *Command, fields string) ([]byte, error) {
	path, err := pathCat(d.subvol, c.Path)
	if err != nil {
		return nil, err
	}
	return dumpLine(c.Type, path, fields), nil
}

func dumpLine(t CommandType, path, fields string) []byte {
	line := fmt.Appendf(nil, "%-16s", t.String())
	n := len(line)
	line = appendEscaped(line, path)
	if fields == "" {
		return append(line, '\n')
	}
	// At least one space, and short paths padded to 32 columns.
	line = append(line, ' ')
	for len(line)-n < 32 {
		line = append(line, ' ')
	}
	line = append(line, fields...)
	return append(line, '\n')
}

// appendEscaped escapes path as btrfs-progs' print_path_escaped does: C
// escapes for control characters, a backslash before a space or a
// backslash, and octal for any other byte that is not printable ASCII.
func appendEscaped(b []byte, path string) []byte {
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch c {
		case '\a':
			b = append(b, `\a`...)
		case '\b':
			b = append(b, `\b`...)
		case 0x1b:
			b = append(b, `\e`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\v':
			b = append(b, `\v`...)
		case ' ':
			b = append(b, `\ `...)
		case '\\':
			b = append(b, `\\`...)
		default:
			if c < 0x20 || c > 0x7e {
				b = append(b, '\\', '0'+c>>6, '0'+(c>>3)&7, '0'+c&7)
			} else {
				b = append(b, c)
			}
		}
	}
	return b
}

// pathCat joins like btrfs-progs' path_cat_out: one trailing "/" of each
// part dropped, then p1 "/" p2, both read as C strings.
func pathCat(p1, p2 string) (string, error) {
	p1, p2 = cString(p1), cString(p2)
	if len(p1)+len(p2)+2 >= pathMax {
		return "", fmt.Errorf("path %q under %q is longer than PATH_MAX", p2, p1)
	}
	return strings.TrimSuffix(p1, "/") + "/" + strings.TrimSuffix(p2, "/"), nil
}

// cString is s up to its first NUL, as C's string functions see it.
func cString(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// strftime formats t as strftime's "%FT%T%z" in the local zone does.
func strftime(t time.Time) (string, error) {
	t = t.Local()
	year := t.Year()
	// localtime_r fails when the year does not fit tm_year, an int.
	if year-1900 > 1<<31-1 || year-1900 < -1<<31 {
		return "", fmt.Errorf("time %d is out of range", t.Unix())
	}
	_, off := t.Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("%d-%02d-%02dT%02d:%02d:%02d%c%02d%02d",
		year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), sign, off/3600, off/60%60), nil
}
