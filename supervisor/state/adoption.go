package state

import "path/filepath"

// Adoption is how a project was adopted, and how far: what undoes it
// after a crash, and what release undoes.
type Adoption struct {
	// Path is the directory adopted, where the host keeps seeing it.
	Path string `json:"path"`
	// More are further directories adopted into the same project (the
	// app and its data: one volume, snapshotted as one). Only AdoptMount:
	// the volume then holds each directory, Path too, at its own path
	// below its root, and a mount unit binds each back.
	More []string `json:"more,omitempty"`
	// How: AdoptSwap (a volume made beside it, swapped in by a rename;
	// Location is Path) or AdoptMount (a volume of the pool mounted at
	// each path by a mount unit, units.MountUnitName of the path).
	How string `json:"how"`
	// Temp is the volume being filled beside Path (AdoptSwap), or the
	// pool's volume (AdoptMount), while Phase is not AdoptDone.
	Temp  string `json:"temp,omitempty"`
	Phase string `json:"phase"`
	// Owner is the uid of the member of group sandboxd who adopted its
	// own directory (and may release it); nil for root's and admins'
	// adoptions, and in records older than it.
	Owner *uint32 `json:"owner,omitempty"`
}

// Paths are the directories adopted: Path, then More.
func (a *Adoption) Paths() []string { return append([]string{a.Path}, a.More...) }

// InVolume is where the volume at root holds adopted directory p: the
// whole volume, or (with More) p's own path below its root.
func (a *Adoption) InVolume(root, p string) string {
	if len(a.More) == 0 {
		return root
	}
	return filepath.Join(root, p)
}

// Adoption ways and phases.
const (
	AdoptSwap  = "swap"
	AdoptMount = "mount"
	// AdoptOwned: a directory others than root can change (a home's, a
	// service's data). Its files are copied by descriptor into a volume
	// of the pool (Temp, then Location), which is mounted at each path
	// by descriptor (open_tree, move_mount), never by a mount unit; the
	// daemon makes the mounts again when it starts.
	AdoptOwned = "owned"
	// AdoptCopying: the volume is being filled; the directory is whole.
	AdoptCopying = "copying"
	// AdoptSwitching: the volume is full and about to take the
	// directory's place (a rename, or a mount): which one holds Path
	// after a crash is read off the filesystem.
	AdoptSwitching = "switching"
	AdoptDone      = "done"
	// AdoptReleasing: the project is forgotten, its files going back to
	// a plain directory at Path; a daemon that starts finishes it.
	AdoptReleasing = "releasing"
)
