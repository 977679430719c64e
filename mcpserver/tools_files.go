package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The file tools, on the daemon's file API: done in the sandbox's own
// view and as the caller, so a path means what it means to a command
// there (symlinks resolve inside it) and the daemon refuses what the
// caller may not touch.

type readIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path     string `json:"path" jsonschema:"a path in the sandbox; a relative path starts at the project's directory"`
	Offset   uint64 `json:"offset,omitempty" jsonschema:"read from this byte on"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes; without offset and max_bytes the whole file is read, which must not be over the server's cap"`
	Root     bool   `json:"root,omitempty" jsonschema:"read as root of the sandbox"`
}

// readOut is what file_read returns: the content in the text alone, once
// (the structured content has the rest).
type readOut struct {
	Path     string `json:"path"`
	Content  string `json:"-"`
	Encoding string `json:"encoding" jsonschema:"how the text's content is: utf-8, the text itself, or base64 when the bytes are not text (not UTF-8, or with NUL or other control bytes)"`
	Offset   uint64 `json:"offset" jsonschema:"where the content starts in the file"`
	Bytes    int    `json:"bytes" jsonschema:"how many bytes content holds"`
	EOF      bool   `json:"eof" jsonschema:"the content reaches the file's end"`
}

// text is the content under a line saying what it is and where it ends.
func (o readOut) text() string {
	end := "the end of the file"
	if !o.EOF {
		end = fmt.Sprintf("more follows: read on from offset %d", o.Offset+uint64(o.Bytes))
	}
	text := fmt.Sprintf("%s: %s from offset %d, %s; %s\n--- content ---\n%s", o.Path, plural(o.Bytes, "byte"), o.Offset, o.Encoding, end, o.Content)
	if o.Content != "" && !strings.HasSuffix(o.Content, "\n") {
		text += "\n"
	}
	return text
}

type writeIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path     string `json:"path" jsonschema:"a path in the sandbox; a relative path starts at the project's directory. Its directory must exist"`
	Content  string `json:"content" jsonschema:"what to write: the file's whole new content (or what to add to it, with append)"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64, for bytes that are not text"`
	Mode     string `json:"mode,omitempty" jsonschema:"the permission bits of a file it makes, in octal: 644 (the default), 755 for a script"`
	Append   bool   `json:"append,omitempty" jsonschema:"add content to the file's end instead of replacing it"`
	Root     bool   `json:"root,omitempty" jsonschema:"write as root of the sandbox"`
}

type writeOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes" jsonschema:"how many bytes were written"`
}

type editIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path    string `json:"path" jsonschema:"a path in the sandbox; a relative path starts at the project's directory"`
	Old     string `json:"old" jsonschema:"the exact text to replace, as it is in the file (whitespace too); every occurrence is replaced"`
	New     string `json:"new" jsonschema:"the text to put in its place"`
}

type editOut struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements" jsonschema:"how many occurrences were replaced"`
}

type listFilesIn struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Path      string `json:"path,omitempty" jsonschema:"a directory (or file) in the sandbox; default: the project's directory"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"list the whole tree below it (symlinks not followed)"`
}

type fileEntry struct {
	Path     string `json:"path" jsonschema:"its path from the listed directory"`
	Kind     string `json:"kind" jsonschema:"file, dir, symlink, fifo, socket or device"`
	Mode     string `json:"mode" jsonschema:"its permission bits, in octal"`
	Size     uint64 `json:"size"`
	Modified string `json:"modified"`
	Target   string `json:"target,omitempty" jsonschema:"a symlink's target"`
}

type listFilesOut struct {
	Entries []fileEntry `json:"entries"`
}

// maxListEntries bounds file_list: more is more than a model reads.
const maxListEntries = 2000

func (s *server) addFileTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "file_read", Annotations: readOnly("Read a file"),
		Description: fmt.Sprintf("Read a file of a sandbox, as you see it there: whole (at most %d KiB), or a part (offset, max_bytes). Text comes as it is, other bytes as base64.",
			s.opts.MaxFileBytes>>10)},
		s.readFile)
	add(s, m, &mcp.Tool{Name: "file_write", Annotations: destructive("Write a file"),
		Description: fmt.Sprintf("Write a file of a sandbox: its content is replaced (or, with append, added to); a missing file is made. At most %d KiB a call: write a larger file in parts with append.",
			s.opts.MaxFileBytes>>10)},
		s.writeFile)
	add(s, m, &mcp.Tool{Name: "file_edit", Annotations: destructive("Edit a file"),
		Description: "Replace exact text in a file of a sandbox, in place: every occurrence of old becomes new. Text that is not there is an error; file_read shows the file as it is."},
		s.editFile)
	add(s, m, &mcp.Tool{Name: "file_list", Annotations: readOnly("List files"),
		Description: fmt.Sprintf("List a directory of a sandbox (or, recursive, the tree below it; at most %d entries): each entry's path, kind, mode, size, time and a symlink's target.", maxListEntries)},
		s.listFiles)
}

func (s *server) readFile(ctx context.Context, in readIn) (readOut, error) {
	if in.MaxBytes < 0 || in.MaxBytes > s.opts.MaxFileBytes {
		return readOut{}, invalidf("max_bytes is %d: give at most %d (the server's cap), and read on from offset for more", in.MaxBytes, s.opts.MaxFileBytes)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return readOut{}, err
	}
	if in.Offset == 0 && in.MaxBytes == 0 {
		data, err := sb.ReadFile(ctx, in.Path, client.ReadOptions{Limit: int64(s.opts.MaxFileBytes), Root: in.Root})
		if err != nil {
			return readOut{}, err
		}
		content, enc := fileText(data)
		return readOut{Path: in.Path, Content: content, Encoding: enc, Bytes: len(data), EOF: true}, nil
	}
	want := in.MaxBytes
	if want == 0 {
		want = s.opts.MaxFileBytes
	}
	data, err := sb.ReadFileAt(ctx, in.Path, in.Offset, uint64(want))
	if err != nil {
		return readOut{}, err
	}
	out := readOut{Path: in.Path, Offset: in.Offset, EOF: len(data) < want}
	// A part of a text file may start or end inside a character: that
	// is not binary. The part is then the whole characters in it.
	if !utf8.Valid(data) && isText(bytes.ToValidUTF8(data, nil)) {
		start, end := 0, len(data)
		if in.Offset > 0 {
			start = len(data) - len(trimPartialStart(data))
		}
		if !out.EOF {
			end = len(trimPartialEnd(data))
		}
		if start <= end && utf8.Valid(data[start:end]) {
			out.Offset = in.Offset + uint64(start)
			data = data[start:end]
		}
	}
	out.Content, out.Encoding = fileText(data)
	out.Bytes = len(data)
	if !out.EOF || in.Offset > 0 {
		s.linkFilePart(ctx, sb, in.Path)
	}
	return out, nil
}

func (s *server) writeFile(ctx context.Context, in writeIn) (writeOut, error) {
	data, err := decodeContent(in.Content, in.Encoding)
	if err != nil {
		return writeOut{}, invalidf("writing %s: %v", in.Path, err)
	}
	if len(data) > s.opts.MaxFileBytes {
		return writeOut{}, invalidf("writing %s: its content is %d bytes, over the %d a call may write: write it in parts, the first without append and the others with it",
			in.Path, len(data), s.opts.MaxFileBytes)
	}
	opts := client.WriteOptions{Append: in.Append, Root: in.Root}
	if in.Mode != "" {
		mode, err := parseMode(in.Mode)
		if err != nil {
			return writeOut{}, invalidf("writing %s: %v", in.Path, err)
		}
		opts.Mode = mode
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return writeOut{}, err
	}
	if err := sb.WriteFile(ctx, in.Path, data, opts); err != nil {
		return writeOut{}, err
	}
	return writeOut{Path: in.Path, Bytes: len(data)}, nil
}

// parseMode reads octal permission bits, set-id and sticky among them.
func parseMode(text string) (os.FileMode, error) {
	n, err := strconv.ParseUint(text, 8, 32)
	if err != nil || n > 0o7777 || n == 0 {
		return 0, fmt.Errorf("mode %q is not octal permission bits, such as 644 or 755", text)
	}
	mode := os.FileMode(n & 0o777)
	for bit, m := range map[uint64]os.FileMode{0o4000: os.ModeSetuid, 0o2000: os.ModeSetgid, 0o1000: os.ModeSticky} {
		if n&bit != 0 {
			mode |= m
		}
	}
	return mode, nil
}

func (s *server) editFile(ctx context.Context, in editIn) (editOut, error) {
	if in.Old == "" {
		return editOut{}, invalidf("editing %s: old is empty: give the exact text to replace", in.Path)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return editOut{}, err
	}
	n, err := sb.EditFile(ctx, in.Path, in.Old, in.New)
	if err != nil {
		return editOut{}, err
	}
	return editOut{Path: in.Path, Replacements: n}, nil
}

func (s *server) listFiles(ctx context.Context, in listFilesIn) (listFilesOut, error) {
	path := in.Path
	if path == "" {
		path = "."
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return listFilesOut{}, err
	}
	entries, err := sb.ListFiles(ctx, path, client.ListOptions{Recursive: in.Recursive, MaxEntries: maxListEntries})
	if err != nil {
		return listFilesOut{}, err
	}
	out := listFilesOut{Entries: make([]fileEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, entryOf(e))
	}
	return out, nil
}

func entryOf(e sandboxd1.FileEntry) fileEntry {
	return fileEntry{Path: e.Path, Kind: e.Kind, Mode: fmt.Sprintf("%04o", e.Mode), Size: e.Size, Modified: micros(e.Modified), Target: e.Target}
}
