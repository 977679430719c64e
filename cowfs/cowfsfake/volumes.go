package cowfsfake

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

// path returns where sandboxd's volume name lives, after checking the name.
func (b *Backend) path(name string) (string, error) {
	if err := cowfs.ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(b.root, name), nil
}

func (b *Backend) volume(name string, rec *record) cowfs.Volume {
	path := filepath.Join(b.root, name)
	return cowfs.Volume{Name: name, ID: path, Path: path, Kind: rec.Kind, Origin: rec.Origin, Created: rec.Created, Ours: true}
}

// under says whether path is below dir (not dir itself).
func under(path, dir string) bool { return strings.HasPrefix(path, dir+"/") }

// projectKey is the key of the project volume at path, or why there is
// none: nothing there, a symlink, a directory the fake did not make one.
func (b *Backend) projectKey(path string) (string, *record, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return "", nil, notFound(err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return "", nil, fmt.Errorf("a symlink: %w", cowfs.ErrNotVolume)
	}
	e, err := stat(path)
	if err != nil {
		return "", nil, err
	}
	rec := b.state.Projects[e.key]
	if rec == nil {
		return e.key, nil, fmt.Errorf("a directory, not a project volume (the fake's MakeProject makes them): %w", cowfs.ErrNotVolume)
	}
	return e.key, rec, nil
}

// find returns the bookkeeping and path of v: one of sandboxd's, under
// the root, or a project.
func (b *Backend) find(v cowfs.Volume) (*record, string, error) {
	if v.Ours && filepath.Dir(v.ID) == b.root {
		name := filepath.Base(v.ID)
		rec := b.state.Volumes[name]
		if _, err := os.Lstat(v.ID); rec == nil || err != nil {
			return nil, "", fmt.Errorf("volume %s: %w", name, cowfs.ErrNotFound)
		}
		return rec, v.ID, nil
	}
	_, rec, err := b.projectKey(v.ID)
	if err != nil {
		return nil, "", fmt.Errorf("volume %s: %w", v.Name, err)
	}
	return rec, v.ID, nil
}

// ours checks that v is one of sandboxd's volumes, directly under the
// root, and returns its bookkeeping.
func (b *Backend) ours(v cowfs.Volume, doing string) (*record, error) {
	if !v.Ours || filepath.Dir(v.ID) != b.root {
		return nil, fmt.Errorf("%s %s: %w", doing, v.Name, cowfs.ErrNotOurs)
	}
	rec, _, err := b.find(v)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", doing, v.Name, err)
	}
	return rec, nil
}

func (b *Backend) Project(ctx context.Context, location string) (cowfs.Volume, error) {
	if err := b.enter(ctx, "Project", location); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	return b.project(location)
}

func (b *Backend) project(location string) (cowfs.Volume, error) {
	if !filepath.IsAbs(location) {
		return cowfs.Volume{}, fmt.Errorf("opening project %q: not an absolute path: %w", location, cowfs.ErrInvalidName)
	}
	path := filepath.Clean(location)
	if _, err := os.Lstat(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, notFound(err))
	}
	if !under(path, b.pool) {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: outside the fake pool %s: %w", path, b.pool, cowfs.ErrOutsidePool)
	}
	if path == b.root || under(path, b.root) {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: it is under sandboxd's root: %w", path, cowfs.ErrInvalidName)
	}
	_, rec, err := b.projectKey(path)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, err)
	}
	return cowfs.Volume{Name: location, ID: path, Path: path, Kind: cowfs.KindProject, Created: rec.Created}, nil
}

func (b *Backend) Create(ctx context.Context, name string) (cowfs.Volume, error) {
	if err := b.enter(ctx, "Create", name); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume %s: %w", name, err)
	}
	rec := &record{Kind: cowfs.KindWritable, Created: time.Now(), RootMode: 0o755, UUID: newUUID(), Files: map[string]fileID{}}
	if err := b.add(name, rec, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume %s: %w", name, err)
	}
	return b.volume(name, rec), nil
}

// add records sandboxd's new volume name, whose files are at path; if
// the bookkeeping cannot be saved, the volume is undone.
func (b *Backend) add(name string, rec *record, path string) error {
	b.state.Volumes[name] = rec
	if err := b.save(); err != nil {
		delete(b.state.Volumes, name)
		_ = removeTree(context.Background(), path)
		return err
	}
	return nil
}

// absent says ErrExists if anything is at path.
func absent(name, path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("volume %s: %w", name, cowfs.ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return nil
}

func (b *Backend) Get(ctx context.Context, name string) (cowfs.Volume, error) {
	if err := b.enter(ctx, "Get", name); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, err
	}
	if _, err := os.Lstat(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, notFound(err))
	}
	rec := b.state.Volumes[name]
	if rec == nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %s is not a volume of the fake's: %w", name, path, cowfs.ErrNotVolume)
	}
	return b.volume(name, rec), nil
}

func (b *Backend) List(ctx context.Context) ([]cowfs.Volume, error) {
	if err := b.enter(ctx, "List", ""); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	var vols []cowfs.Volume
	for _, name := range slices.Sorted(maps.Keys(b.state.Volumes)) {
		if _, err := os.Lstat(filepath.Join(b.root, name)); err != nil {
			continue // its files were removed behind the fake's back
		}
		vols = append(vols, b.volume(name, b.state.Volumes[name]))
	}
	return vols, nil
}

func (b *Backend) Delete(ctx context.Context, v cowfs.Volume) error {
	if err := b.enter(ctx, "Delete", v.Name); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if _, err := b.ours(v, "deleting"); err != nil {
		return err
	}
	name := filepath.Base(v.ID)
	// Rename first: a crash mid-way leaves a leftover that Open removes,
	// never a half-deleted volume under its own name.
	tmp := filepath.Join(b.root, tmpPrefix+"del-"+name)
	if err := os.Rename(v.ID, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, notFound(err))
	}
	rec := b.state.Volumes[name]
	delete(b.state.Volumes, name)
	if err := b.save(); err != nil {
		b.state.Volumes[name] = rec
		_ = os.Rename(tmp, v.ID)
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	if err := removeTree(ctx, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	return nil
}

// OnPool says whether dir is in the fake pool (the root's parent, or
// below it), outside sandboxd's root.
func (b *Backend) OnPool(dir string) (bool, error) {
	if _, err := os.Stat(dir); err != nil {
		return false, notFound(err)
	}
	dir = filepath.Clean(dir)
	return (dir == b.pool || under(dir, b.pool)) && dir != b.root && !under(dir, b.root), nil
}

// MakeProject makes an empty project volume at path, in the pool and
// not under the root.
func (b *Backend) MakeProject(ctx context.Context, path string) (cowfs.Volume, error) {
	if err := b.enter(ctx, "MakeProject", path); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	if err := b.projectPath(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("making project volume %s: %w", path, err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		return cowfs.Volume{}, fmt.Errorf("making project volume %s: %w", path, existsOr(err))
	}
	e, err := stat(path)
	if err == nil {
		b.state.Projects[e.key] = &record{Kind: cowfs.KindProject, Created: time.Now(), RootMode: 0o755, UUID: newUUID(), Files: map[string]fileID{}}
		if err = b.save(); err != nil {
			delete(b.state.Projects, e.key)
		}
	}
	if err != nil {
		_ = os.Remove(path)
		return cowfs.Volume{}, fmt.Errorf("making project volume %s: %w", path, err)
	}
	return b.project(path)
}

// RemoveProject removes the project volume at path, with what it holds.
func (b *Backend) RemoveProject(ctx context.Context, path string) error {
	if err := b.enter(ctx, "RemoveProject", path); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if err := b.projectPath(path); err != nil {
		return fmt.Errorf("removing project volume %s: %w", path, err)
	}
	key, _, err := b.projectKey(path)
	if err != nil {
		return fmt.Errorf("removing project volume %s: %w", path, err)
	}
	if err := removeTree(ctx, path); err != nil {
		return fmt.Errorf("removing project volume %s: %w", path, err)
	}
	delete(b.state.Projects, key)
	return b.save()
}

// IsVolume says whether path is a project volume of the fake's, or one
// of sandboxd's (not a symlink to one).
func (b *Backend) IsVolume(path string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if filepath.Dir(filepath.Clean(path)) == b.root {
		st, err := os.Lstat(path)
		if err != nil {
			return false, notFound(err)
		}
		return st.IsDir() && b.state.Volumes[filepath.Base(path)] != nil, nil
	}
	_, _, err := b.projectKey(path)
	if errors.Is(err, cowfs.ErrNotVolume) {
		return false, nil
	}
	return err == nil, err
}

// projectPath checks that path may be a project volume: absolute, clean,
// in the pool, not sandboxd's root or under it, its directory there.
func (b *Backend) projectPath(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("not an absolute, clean path: %w", cowfs.ErrInvalidName)
	}
	if path == b.root || under(path, b.root) {
		return fmt.Errorf("under sandboxd's root %s: %w", b.root, cowfs.ErrInvalidName)
	}
	if !under(path, b.pool) {
		return fmt.Errorf("outside the fake pool %s: %w", b.pool, cowfs.ErrOutsidePool)
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return notFound(err)
	}
	return nil
}

func existsOr(err error) error {
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %w", cowfs.ErrExists, err)
	}
	return notFound(err)
}
