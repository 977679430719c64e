package state

import (
	"path/filepath"
	"slices"
)

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
	// ByUnit are the paths of an AdoptOwned adoption whose volume a
	// mount unit binds back (units.BindMount, at boot, before services),
	// as AdoptMount's: those whose every directory above is root's alone,
	// so that their owner cannot rename or replace them. The others (a
	// home's) the daemon mounts by descriptor, again at each start. None
	// in records older than it: all by the daemon, as then.
	ByUnit []string `json:"by_unit,omitempty"`
}

// Unit says whether a mount unit binds adopted path p back.
func (a *Adoption) Unit(p string) bool {
	return a.How == AdoptMount || a.How == AdoptOwned && slices.Contains(a.ByUnit, p)
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
	// of the pool (Temp, then Location), bound back at each path by a
	// mount unit where only root can change the directories above it
	// (ByUnit: mounted at boot, before the services that use it), else
	// mounted by descriptor (open_tree, move_mount), which the daemon
	// makes again when it starts.
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
