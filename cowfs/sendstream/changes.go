package sendstream

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Changes reads an incremental stream (`btrfs send -p BASE SNAP`, with or
// without --no-data) and lists the paths that differ from BASE to SNAP,
// sorted by path. A full stream lists everything as Added.
//
// A stream names only what it changes, through names that move as it goes
// (new entries are made under orphan names like "o257-7-0" and renamed into
// place; a file is renamed by a link to the new name and an unlink of the
// old). So Changes keeps a tree of the names it has met and the inodes
// behind them, each knowing where it was in BASE, then compares:
//
//   - A new inode is Added at each of its final names, a new link to an
//     inode of BASE too.
//   - An inode of BASE that lost a name and gained another, by rename or by
//     link and unlink, is Renamed (Path its name in BASE, NewPath its name
//     in SNAP). Entries that moved with their directory are not listed.
//   - A name of BASE that is gone is Deleted, at its path in BASE: each
//     entry of a deleted tree is.
//   - write, clone, truncate and update_extent make an inode Modified, at
//     its names in SNAP. chmod, chown, set_xattr and remove_xattr make it
//     Metadata; so does utimes, unless the inode is a directory (whose
//     times move whenever an entry in it does) or its names changed (which
//     moves its ctime).
//   - A path both Deleted and Added or changed (a name given to another
//     inode) is Modified. Each path has one entry, except that a Renamed
//     one's old name may also be another's new name.
//
// Type is what the stream says: nothing about an inode of BASE that it only
// renames, unlinks or changes the metadata of, which then has TypeUnknown
// (a directory is known as one once a path goes through it). The root is
// ".". Changes reads one subvolume: a stream of several is
// cowfs.ErrUnsupported.
func Changes(r io.Reader) ([]cowfs.Change, error) { return ChangesWith(r, Options{}) }

// Options tell ChangesWith more than the stream does.
type Options struct {
	// BaseTimes gives the modification and change times of path in BASE.
	// With it, a utimes that leaves both as they were (an access time
	// moved: someone read the file or listed the directory) is no change.
	BaseTimes func(path string) (mtime, ctime time.Time, ok bool)
}

// ChangesWith is Changes, with what o tells.
func ChangesWith(r io.Reader, o Options) ([]cowfs.Change, error) {
	sr, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	t := newTree()
	for n := 1; ; n++ {
		c, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := t.apply(c); err != nil {
			return nil, fmt.Errorf("listing changes: command %d (%s) at byte %d: %w", n, c.Type, c.Offset, err)
		}
	}
	return t.changes(o), nil
}

// inode is a file, directory or other object, with one or more names.
type inode struct {
	base                 bool // it was in BASE
	typ                  cowfs.FileType
	dir                  bool // known to be a directory
	content, meta, times bool
	mtime, ctime         time.Time // of its last utimes
	entries              []*entry  // every name it had in BASE or was given
}

// entry is a name in the tree: one of BASE, or one the stream made.
type entry struct {
	ino      *inode
	name     string
	parent   *entry            // nil for the root and for removed names
	children map[string]*entry // the names now in this directory
	removed  bool

	// base names were in BASE, as baseName in baseParent, at basePath.
	base               bool
	baseParent         *entry
	baseName, basePath string
	baseSeen           map[string]bool // names of BASE already made entries here
}

// inPlace says whether e is a name of BASE that is still where it was.
func (e *entry) inPlace() bool {
	return e.base && !e.removed && e.parent == e.baseParent && e.name == e.baseName
}

type tree struct {
	root    *entry
	inodes  []*inode // in the order they were met
	subvols int
}

func newTree() *tree {
	ino := &inode{base: true, dir: true, typ: cowfs.TypeDir}
	root := &entry{ino: ino, base: true}
	ino.entries = []*entry{root}
	return &tree{root: root, inodes: []*inode{ino}}
}

// lookup finds the entry at path, making the entries of BASE it goes
// through as it first meets them.
func (t *tree) lookup(path string) (*entry, error) {
	e := t.root
	if path == "" {
		return e, nil
	}
	for _, name := range strings.Split(path, "/") {
		if badName(name) {
			return nil, fmt.Errorf("%w: path %q has a %q element", cowfs.ErrCorruptStream, path, name)
		}
		e.ino.dir = true
		child := e.children[name]
		if child == nil {
			if !e.base || e.baseSeen[name] {
				return nil, fmt.Errorf("%w: no entry %q", cowfs.ErrCorruptStream, path)
			}
			child = t.baseChild(e, name)
		}
		e = child
	}
	return e, nil
}

// baseChild makes the entry of BASE called name in the directory dir.
func (t *tree) baseChild(dir *entry, name string) *entry {
	basePath := name
	if dir != t.root {
		basePath = dir.basePath + "/" + name
	}
	e := &entry{base: true, baseParent: dir, baseName: name, basePath: basePath}
	t.newInode(&inode{base: true}, e)
	if dir.baseSeen == nil {
		dir.baseSeen = make(map[string]bool)
	}
	dir.baseSeen[name] = true
	attach(dir, name, e)
	return e
}

func (t *tree) newInode(ino *inode, e *entry) {
	t.inodes = append(t.inodes, ino)
	ino.entries = append(ino.entries, e)
	e.ino = ino
}

func attach(dir *entry, name string, e *entry) {
	if dir.children == nil {
		dir.children = make(map[string]*entry)
	}
	e.parent, e.name = dir, name
	dir.children[name] = e
}

// place puts e at path. A name already there (the stream unlinks or moves
// away what it overwrites, so this is for safety) is removed.
func (t *tree) place(path string, e *entry) error {
	dir, name := t.root, path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		var err error
		if dir, err = t.lookup(path[:i]); err != nil {
			return err
		}
		name = path[i+1:]
	}
	if name == "" {
		return fmt.Errorf("%w: no name in %q", cowfs.ErrCorruptStream, path)
	}
	if badName(name) {
		return fmt.Errorf("%w: path %q has a %q element", cowfs.ErrCorruptStream, path, name)
	}
	dir.ino.dir = true
	if old := dir.children[name]; old != nil {
		remove(old)
	}
	if dir.base {
		// Whatever BASE had under this name is gone by now.
		if dir.baseSeen == nil {
			dir.baseSeen = make(map[string]bool)
		}
		dir.baseSeen[name] = true
	}
	attach(dir, name, e)
	return nil
}

// badName says whether name cannot be one element of a path in a stream:
// no kernel writes an empty one, "." or "..", or a NUL byte, and Apply
// and the unified diff refuse them.
func badName(name string) bool {
	return name == "" || name == "." || name == ".." || strings.IndexByte(name, 0) >= 0
}

// remove takes e, and anything still in it, out of the tree.
func remove(e *entry) {
	for _, child := range e.children {
		remove(child)
	}
	delete(e.parent.children, e.name)
	e.parent, e.removed = nil, true
}

// create makes a new inode of type typ at path.
func (t *tree) create(path string, typ cowfs.FileType) error {
	e := &entry{}
	if err := t.place(path, e); err != nil {
		return err
	}
	t.newInode(&inode{typ: typ, dir: typ == cowfs.TypeDir}, e)
	return nil
}

func (t *tree) apply(c *Command) error {
	switch c.Type {
	case CmdSubvol, CmdSnapshot:
		if t.subvols++; t.subvols > 1 {
			return fmt.Errorf("a stream of more than one subvolume: %w", cowfs.ErrUnsupported)
		}
		// A full stream starts from nothing: every entry in it is new.
		t.root.base = c.Type == CmdSnapshot
		t.root.ino.base = t.root.base
		return nil
	case CmdMkfile:
		return t.create(c.Path, cowfs.TypeFile)
	case CmdMkdir:
		return t.create(c.Path, cowfs.TypeDir)
	case CmdMknod:
		return t.create(c.Path, modeType(c.Mode))
	case CmdMkfifo:
		return t.create(c.Path, cowfs.TypeFIFO)
	case CmdMksock:
		return t.create(c.Path, cowfs.TypeSocket)
	case CmdSymlink:
		return t.create(c.Path, cowfs.TypeSymlink)
	case CmdLink:
		target, err := t.lookup(c.PathLink)
		if err != nil {
			return err
		}
		if target == t.root {
			return fmt.Errorf("%w: a link to the root", cowfs.ErrCorruptStream)
		}
		e := &entry{ino: target.ino}
		if err := t.place(c.Path, e); err != nil {
			return err
		}
		target.ino.entries = append(target.ino.entries, e)
		return nil
	case CmdRename:
		e, err := t.lookup(c.Path)
		if err != nil {
			return err
		}
		if e == t.root {
			return fmt.Errorf("%w: renaming the root", cowfs.ErrCorruptStream)
		}
		delete(e.parent.children, e.name)
		return t.place(c.PathTo, e)
	case CmdUnlink, CmdRmdir:
		e, err := t.lookup(c.Path)
		if err != nil {
			return err
		}
		if e == t.root {
			return fmt.Errorf("%w: removing the root", cowfs.ErrCorruptStream)
		}
		if c.Type == CmdRmdir {
			e.ino.dir = true
		}
		remove(e)
		return nil
	case CmdEnd:
		return nil
	}
	e, err := t.lookup(c.Path)
	if err != nil {
		return err
	}
	switch c.Type {
	case CmdWrite, CmdClone, CmdTruncate, CmdUpdateExtent:
		e.ino.content = true
		if e.ino.typ == cowfs.TypeUnknown {
			e.ino.typ = cowfs.TypeFile
		}
	case CmdChmod, CmdChown, CmdSetXattr, CmdRemoveXattr:
		e.ino.meta = true
	case CmdUtimes:
		e.ino.times = true
		e.ino.mtime, e.ino.ctime = c.MTime, c.CTime
	}
	return nil
}

// modeType is the type of an inode of the given mode.
func modeType(mode uint64) cowfs.FileType {
	switch mode & 0o170000 {
	case 0o010000:
		return cowfs.TypeFIFO
	case 0o140000:
		return cowfs.TypeSocket
	case 0o100000:
		return cowfs.TypeFile
	case 0o020000, 0o060000:
		return cowfs.TypeDevice
	}
	return cowfs.TypeUnknown
}

// path is where e is now.
func (t *tree) path(e *entry) string {
	if e == t.root {
		return "."
	}
	var names []string
	for ; e != t.root; e = e.parent {
		names = append(names, e.name)
	}
	slices.Reverse(names)
	return strings.Join(names, "/")
}

// changes compares each inode's names and state now with BASE.
func (t *tree) changes(o Options) []cowfs.Change {
	byPath := make(map[string]cowfs.Change)
	var renames []cowfs.Change
	add := func(c cowfs.Change) {
		if old, ok := byPath[c.Path]; ok {
			c = merge(old, c)
		}
		byPath[c.Path] = c
	}
	for _, ino := range t.inodes {
		typ := ino.typ
		if ino.dir {
			typ = cowfs.TypeDir
		}
		var gone, made, here []*entry // names of BASE lost, names gained, names now
		for _, e := range ino.entries {
			if e == t.root && !e.base {
				continue // the root of a full stream: its entries are what is new
			}
			if !e.removed {
				here = append(here, e)
			}
			switch {
			case e.inPlace():
			case e.base && !e.removed:
				// A name of BASE moved by rename.
				renames = append(renames, cowfs.Change{Path: e.basePath, NewPath: t.path(e), Kind: cowfs.Renamed, Type: typ})
			case e.base:
				gone = append(gone, e)
			case !e.removed:
				made = append(made, e)
			}
		}
		// btrfs renames a file by linking the new name and unlinking the
		// old: a name lost and a name gained by one inode are a rename.
		for len(gone) > 0 && len(made) > 0 {
			renames = append(renames, cowfs.Change{Path: gone[0].basePath, NewPath: t.path(made[0]), Kind: cowfs.Renamed, Type: typ})
			gone, made = gone[1:], made[1:]
		}
		for _, e := range gone {
			add(cowfs.Change{Path: e.basePath, Kind: cowfs.Deleted, Type: typ})
		}
		for _, e := range made {
			add(cowfs.Change{Path: t.path(e), Kind: cowfs.Added, Type: typ})
		}
		// Times alone are no change on a directory (they move whenever an
		// entry in it does), nor on an inode whose names changed (a link,
		// unlink or rename moves its ctime).
		renamed := len(ino.entries) > len(here) || slices.ContainsFunc(here, func(e *entry) bool { return !e.inPlace() })
		var kind cowfs.ChangeKind
		switch {
		case !ino.base:
		case ino.content:
			kind = cowfs.Modified
		case ino.meta || ino.times && !ino.dir && !renamed && !accessOnly(o, t, here, ino):
			kind = cowfs.Metadata
		}
		if kind != "" {
			for _, e := range here {
				add(cowfs.Change{Path: t.path(e), Kind: kind, Type: typ})
			}
		}
	}
	out := renames
	for _, c := range byPath {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b cowfs.Change) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// merge makes one change of two at the same path: a name that replaced a
// deleted one is Modified; otherwise Added beats Modified beats Metadata.
func merge(a, b cowfs.Change) cowfs.Change {
	if b.Kind == cowfs.Deleted {
		a, b = b, a
	}
	if a.Kind == cowfs.Deleted && b.Kind != cowfs.Deleted {
		b.Kind = cowfs.Modified
		return b
	}
	if rank[a.Kind] > rank[b.Kind] {
		return a
	}
	return b
}

var rank = map[cowfs.ChangeKind]int{cowfs.Added: 3, cowfs.Modified: 2, cowfs.Metadata: 1}

// accessOnly says whether ino's utimes moved its access time alone: its
// modification and change times are those it had in BASE.
func accessOnly(o Options, t *tree, here []*entry, ino *inode) bool {
	if o.BaseTimes == nil || len(here) == 0 {
		return false
	}
	mtime, ctime, ok := o.BaseTimes(t.path(here[0]))
	return ok && mtime.Equal(ino.mtime) && ctime.Equal(ino.ctime)
}
