package cowfsfake

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// A stream is streamMagic, a tar archive whose first entry is the
// header (headerName, JSON), and the SHA-256 of all before it: a stream
// cut short or changed anywhere is ErrCorruptStream.
const (
	streamMagic = "cowfsfake stream 1\n"
	headerName  = ".cowfsfake-header"
)

type streamHeader struct {
	UUID     string      // of the volume sent
	Parent   string      // the UUID of the volume an incremental stream is from
	RootMode fs.FileMode // the tree's top directory's mode
	Deleted  []string    // paths of the parent that the volume sent lacks
}

// Send writes the whole tree of to, or with from, the entries that
// differ from from's and the paths from has and to lacks. Sockets, which
// a tar archive cannot hold, are left out; hard links are sent as files.
func (b *Backend) Send(ctx context.Context, w io.Writer, from *cowfs.Volume, to cowfs.Volume) error {
	if err := b.enter(ctx, "Send", to.Name); err != nil {
		return err
	}
	defer b.mu.Unlock()
	stream, err := b.stream(ctx, from, to)
	if err != nil {
		return fmt.Errorf("sending %s: %w", to.Name, err)
	}
	if _, err := w.Write(stream); err != nil {
		return fmt.Errorf("sending %s: %w", to.Name, err)
	}
	return nil
}

func (b *Backend) stream(ctx context.Context, from *cowfs.Volume, to cowfs.Volume) ([]byte, error) {
	toRec, toPath, err := b.find(to)
	if err != nil {
		return nil, err
	}
	if toRec.Kind != cowfs.KindReadOnly {
		return nil, fmt.Errorf("the fake sends only read-only snapshots: %w", cowfs.ErrReadOnly)
	}
	toTree, err := readTree(ctx, toPath)
	if err != nil {
		return nil, err
	}
	hdr := streamHeader{UUID: toRec.UUID, RootMode: toRec.RootMode}
	var fromTree map[string]*entry
	var fromPath string
	if from != nil {
		fromRec, p, err := b.find(*from)
		if err != nil {
			return nil, err
		}
		if fromRec.Kind != cowfs.KindReadOnly {
			return nil, fmt.Errorf("from %s: the fake sends only read-only snapshots: %w", from.Name, cowfs.ErrReadOnly)
		}
		if fromTree, err = readTree(ctx, p); err != nil {
			return nil, err
		}
		hdr.Parent, fromPath = fromRec.UUID, p
		for _, path := range slices.Sorted(maps.Keys(fromTree)) {
			if toTree[path] == nil {
				hdr.Deleted = append(hdr.Deleted, path)
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString(streamMagic)
	tw := tar.NewWriter(&buf)
	header, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: headerName, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(header))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(header); err != nil {
		return nil, err
	}
	for _, path := range slices.Sorted(maps.Keys(toTree)) {
		e := toTree[path]
		if f := fromTree[path]; f != nil && f.typ == e.typ && f.mtime == e.mtime {
			kind, err := compare(f, e, filepath.Join(fromPath, path), filepath.Join(toPath, path))
			if err != nil {
				return nil, err
			}
			if kind == "" {
				continue // the parent has it as it is
			}
		}
		if err := writeEntry(tw, path, e, filepath.Join(toPath, path)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, path string, e *entry, full string) error {
	h := &tar.Header{
		Name: path, Mode: int64(e.mode), Uid: int(e.uid), Gid: int(e.gid), Format: tar.FormatPAX,
		ModTime: time.Unix(e.mtime.Unix()), AccessTime: time.Unix(e.atime.Unix()),
	}
	switch e.typ {
	case cowfs.TypeDir:
		h.Typeflag = tar.TypeDir
	case cowfs.TypeFile:
		h.Typeflag, h.Size = tar.TypeReg, e.size
	case cowfs.TypeSymlink:
		target, err := os.Readlink(full)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	case cowfs.TypeFIFO:
		h.Typeflag = tar.TypeFifo
	case cowfs.TypeDevice:
		var st unix.Stat_t
		if err := unix.Lstat(full, &st); err != nil {
			return err
		}
		h.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			h.Typeflag = tar.TypeBlock
		}
		h.Devmajor, h.Devminor = int64(unix.Major(e.rdev)), int64(unix.Minor(e.rdev))
	default:
		return nil
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if e.typ != cowfs.TypeFile {
		return nil
	}
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, e.size)
	return err
}

// Receive checks the whole stream first, then makes the volume under a
// temporary name, renamed into place once whole: on any failure, nothing
// of it is left.
func (b *Backend) Receive(ctx context.Context, r io.Reader, name string) (cowfs.Volume, error) {
	if err := b.enter(ctx, "Receive", name); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("receiving: %w", err)
	}
	if err := absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("receiving: %w", err)
	}
	staging := filepath.Join(b.root, tmpPrefix+"recv-"+name)
	rec, err := b.receive(ctx, r, staging)
	if err == nil {
		err = os.Rename(staging, path)
	}
	if err != nil {
		_ = removeTree(context.WithoutCancel(ctx), staging)
		return cowfs.Volume{}, fmt.Errorf("receiving %s: %w", name, err)
	}
	if err := b.add(name, rec, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("receiving %s: %w", name, err)
	}
	return b.volume(name, rec), nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{cowfs.ErrCorruptStream}, args...)...)
}

func (b *Backend) receive(ctx context.Context, r io.Reader, staging string) (*record, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	n := len(data) - sha256.Size
	if n < len(streamMagic) || !bytes.HasPrefix(data, []byte(streamMagic)) {
		return nil, corrupt("not a stream of the fake's")
	}
	if sum := sha256.Sum256(data[:n]); !bytes.Equal(sum[:], data[n:]) {
		return nil, corrupt("its checksum does not match: cut short or changed")
	}
	tr := tar.NewReader(bytes.NewReader(data[len(streamMagic):n]))
	h, err := tr.Next()
	if err != nil || h.Name != headerName {
		return nil, corrupt("no header")
	}
	var hdr streamHeader
	if err := json.NewDecoder(tr).Decode(&hdr); err != nil {
		return nil, corrupt("header: %v", err)
	}
	if hdr.Parent == "" {
		if err := os.Mkdir(staging, 0o700); err != nil {
			return nil, classify(err)
		}
	} else {
		parent, parentPath := b.byUUID(hdr.Parent)
		if parent == nil {
			return nil, fmt.Errorf("the stream's parent %s is not here: %w", hdr.Parent, cowfs.ErrNotFound)
		}
		if _, err := b.copyVolume(ctx, parent, parentPath, staging, false); err != nil {
			return nil, classify(err)
		}
		if err := os.Chmod(staging, 0o700); err != nil {
			return nil, err
		}
	}
	for _, p := range hdr.Deleted {
		target, err := beneath(staging, p)
		if err != nil {
			return nil, err
		}
		if err := removeTree(ctx, target); err != nil {
			return nil, err
		}
	}
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, corrupt("%v", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := extract(ctx, tr, h, staging); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, h)
		}
	}
	for _, h := range slices.Backward(dirs) {
		target, _ := beneath(staging, h.Name)
		if err := setMeta(headerEntry(h), target); err != nil {
			return nil, err
		}
	}
	tree, err := readTree(ctx, staging)
	if err != nil {
		return nil, err
	}
	rec := &record{Kind: cowfs.KindReadOnly, Created: time.Now(), RootMode: hdr.RootMode, UUID: newUUID(), Received: hdr.UUID}
	b.fresh(rec, tree)
	return rec, os.Chmod(staging, readOnlyMode)
}

// byUUID finds the read-only volume a stream names as its parent: sent
// from it, or received from it.
func (b *Backend) byUUID(uuid string) (*record, string) {
	for _, name := range slices.Sorted(maps.Keys(b.state.Volumes)) {
		rec := b.state.Volumes[name]
		if rec.Kind == cowfs.KindReadOnly && (rec.UUID == uuid || rec.Received == uuid) {
			return rec, filepath.Join(b.root, name)
		}
	}
	return nil, ""
}

// beneath is where rel lands in dir, refused if it leaves dir or passes
// through a symlink there.
func beneath(dir, rel string) (string, error) {
	if !filepath.IsLocal(rel) || filepath.Clean(rel) != rel {
		return "", corrupt("path %q leaves the volume", rel)
	}
	parts := strings.Split(rel, "/")
	p := dir
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return "", corrupt("path %q passes through a symlink", rel)
		}
	}
	return filepath.Join(dir, rel), nil
}

// extract makes the entry h describes under dir, replacing what is
// there but a directory kept as one.
func extract(ctx context.Context, tr *tar.Reader, h *tar.Header, dir string) error {
	target, err := beneath(dir, strings.TrimSuffix(h.Name, "/"))
	if err != nil {
		return err
	}
	if st, err := os.Lstat(target); err == nil && !(st.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := removeTree(ctx, target); err != nil {
			return err
		}
	}
	e := headerEntry(h)
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return classify(err)
		}
		return os.Chmod(target, 0o700) // filled first; its mode at the end
	case tar.TypeReg:
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return classify(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return classify(err)
		}
		if err := f.Close(); err != nil {
			return classify(err)
		}
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, target); err != nil {
			return classify(err)
		}
	case tar.TypeFifo:
		if err := unix.Mkfifo(target, 0o600); err != nil {
			return classify(err)
		}
	case tar.TypeChar, tar.TypeBlock:
		mode := uint32(unix.S_IFCHR)
		if h.Typeflag == tar.TypeBlock {
			mode = unix.S_IFBLK
		}
		if err := unix.Mknod(target, mode|0o600, int(e.rdev)); err != nil {
			return classify(err)
		}
	default:
		return corrupt("entry %q of type %q", h.Name, h.Typeflag)
	}
	return setMeta(e, target)
}

func headerEntry(h *tar.Header) *entry {
	e := &entry{
		mode: uint32(h.Mode) & 0o7777, uid: uint32(h.Uid), gid: uint32(h.Gid),
		atime: unix.NsecToTimespec(h.AccessTime.UnixNano()), mtime: unix.NsecToTimespec(h.ModTime.UnixNano()),
		rdev: unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)),
	}
	switch h.Typeflag {
	case tar.TypeDir:
		e.typ = cowfs.TypeDir
	case tar.TypeSymlink:
		e.typ = cowfs.TypeSymlink
	default:
		e.typ = cowfs.TypeFile
	}
	return e
}

// classify turns a full disk's error into the sentinels.
func classify(err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: %w", cowfs.ErrNoSpace, err)
	case errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", cowfs.ErrQuotaExceeded, err)
	}
	return err
}
