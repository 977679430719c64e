package cowfs

import "context"

// ProjectMaker is a Backend that can make and remove a project volume at
// a path of its choosing on the pool's filesystem (outside its root):
// what adopting a directory as a project takes (supervisor/adopt.go).
// btrfs has it; ZFS does not yet (a dataset is not made at a path).
type ProjectMaker interface {
	// OnPool says whether dir is on the pool's filesystem, so that a
	// volume made beside it can be swapped with it by a rename.
	OnPool(dir string) (bool, error)
	// MakeProject makes an empty project volume at path (on the pool's
	// filesystem, not directly under the root), which Project opens.
	MakeProject(ctx context.Context, path string) (Volume, error)
	// RemoveProject deletes the project volume at path, with what it
	// holds. It refuses one of sandboxd's own volumes.
	RemoveProject(ctx context.Context, path string) error
	// IsVolume says whether path is a volume (a subvolume) itself.
	IsVolume(path string) (bool, error)
}
