package cowfsfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

const (
	// stateFile holds the bookkeeping in the root; a name starting with
	// '.' is never a volume's.
	stateFile = ".cowfsfake.json"
	// tmpPrefix names what a multi-step operation makes under the root
	// before renaming it into place; Open removes what a crash left.
	tmpPrefix = ".tmp-"
)

// Backend is a fake pool of directories. It is safe for concurrent use:
// one lock is held for the whole of each call.
type Backend struct {
	root string // sandboxd's volumes, absolute and clean
	pool string // the root's parent: where projects may be
	info cowfs.Info

	mu    sync.Mutex
	state state

	hookMu sync.Mutex
	fails  map[[2]string]error
	hook   func(method, name string) error
}

// state is the bookkeeping, as saved.
type state struct {
	Volumes map[string]*record // sandboxd's, by name
	// Projects are by their top directory's key (inode and birth time),
	// not by path: a project volume renamed is still one, as a btrfs
	// subvolume is (an adoption swaps one into a directory's place).
	Projects map[string]*record
	NextID   uint64 // the next file identity to give
}

// record is what the fake knows of one volume.
type record struct {
	Kind    cowfs.Kind
	Origin  string `json:",omitempty"`
	Created time.Time
	Quota   uint64 `json:",omitempty"`
	// RootMode is the tree's top directory's mode: a read-only volume's
	// is 0555 on disk.
	RootMode fs.FileMode
	// UUID names the volume in send streams; Received is the UUID of the
	// volume a received one was sent from (btrfs's received_uuid).
	UUID     string
	Received string `json:",omitempty"`
	// Files gives each file's key (inode and birth time) its identity
	// and what it was when the identity was recorded.
	Files map[string]fileID
}

// fileID is a file's identity and its size and modification time when
// that was recorded, which tell what a volume wrote since (Usage).
type fileID struct {
	ID    uint64
	Size  int64 `json:",omitempty"`
	Mtime int64 `json:",omitempty"`
}

var (
	_ cowfs.Backend      = (*Backend)(nil)
	_ cowfs.ProjectMaker = (*Backend)(nil)
)

// Open opens (making it if needed) a fake pool rooted at root, an
// absolute path whose parent exists: the parent is the pool, where
// projects may be made. Bookkeeping a Backend left in root is read back,
// and what a crash left half made is removed.
func Open(ctx context.Context, root string) (*Backend, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("opening fake root %q: not an absolute path: %w", root, cowfs.ErrInvalidName)
	}
	root = filepath.Clean(root)
	b := &Backend{root: root, pool: filepath.Dir(root)}
	if _, err := os.Stat(b.pool); err != nil {
		return nil, fmt.Errorf("opening fake root %s: %w", root, notFound(err))
	}
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("making fake root %s: %w", root, err)
	}
	b.info = cowfs.Info{
		Backend: "fake",
		Root:    root,
		Version: "cowfsfake",
		Capabilities: cowfs.Capabilities{
			WritableSnapshots:    true, // a copy, made in one call
			IndependentSnapshots: true, // copies depend on nothing
			// ChangedSince answers, by comparing the trees: what a
			// caller sees of it is what a generation would tell.
			Generation: true,
		},
	}
	b.state = state{Volumes: map[string]*record{}, Projects: map[string]*record{}, NextID: 1}
	data, err := os.ReadFile(filepath.Join(root, stateFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &b.state); err != nil {
			return nil, fmt.Errorf("reading the fake's bookkeeping in %s: %w", root, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the fake's bookkeeping in %s: %w", root, err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("reading fake root %s: %w", root, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := removeTree(ctx, filepath.Join(root, e.Name())); err != nil {
				return nil, fmt.Errorf("removing leftover %s: %w", e.Name(), err)
			}
		}
	}
	return b, nil
}

func (b *Backend) Info() cowfs.Info { return b.info }

func (b *Backend) Close() error { return nil }

// Fail makes every later call of method ("Snapshot", "Delete", ...) on
// name fail with err, as is; nil err ends it. name is the volume's name
// (a new one's for Create, Snapshot and Receive), a project's location,
// the group of GroupQuota, or "" for any.
func (b *Backend) Fail(method, name string, err error) {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	if b.fails == nil {
		b.fails = map[[2]string]error{}
	}
	if err == nil {
		delete(b.fails, [2]string{method, name})
		return
	}
	b.fails[[2]string{method, name}] = err
}

// SetHook sets a function asked before every call, with its method and
// name (as Fail names them), outside the fake's lock: what it returns,
// if not nil, is the call's error. It may block, to hold a call.
func (b *Backend) SetHook(hook func(method, name string) error) {
	b.hookMu.Lock()
	defer b.hookMu.Unlock()
	b.hook = hook
}

// enter runs the failures and hook set for a call, then takes the lock;
// the caller unlocks.
func (b *Backend) enter(ctx context.Context, method, name string) error {
	b.hookMu.Lock()
	err := b.fails[[2]string{method, name}]
	if err == nil {
		err = b.fails[[2]string{method, ""}]
	}
	hook := b.hook
	b.hookMu.Unlock()
	if err == nil && hook != nil {
		err = hook(method, name)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	return nil
}

// save writes the bookkeeping whole or not at all.
func (b *Backend) save() error {
	data, err := json.Marshal(&b.state)
	if err != nil {
		return err
	}
	path := filepath.Join(b.root, stateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("saving the fake's bookkeeping: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("saving the fake's bookkeeping: %w", err)
	}
	return nil
}

func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return hex.EncodeToString(u[:])
}

// notFound wraps cowfs.ErrNotFound around a missing file's error.
func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", cowfs.ErrNotFound, err)
	}
	return err
}
