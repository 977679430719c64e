package sandboxd1

import "github.com/godbus/dbus/v5"

// ListEntry is one sandbox as ListSandboxes returns it: the D-Bus struct
// (ssssuto).
type ListEntry struct {
	ID      string
	Name    string // "" when it has none
	Project string
	State   string
	Owner   uint32          // the uid that created it
	Created uint64          // µs since the Unix epoch
	Object  dbus.ObjectPath // its org.sandboxd1.Sandbox object
}

// ProjectEntry is one project as ListProjects returns it: the D-Bus
// struct (sss).
type ProjectEntry struct {
	Name string `json:"name"`
	// Location is a btrfs subvolume path or a ZFS dataset.
	Location string `json:"location"`
	// Origin is "config" (sandboxd.toml's [[project]]) or "added"
	// (AddProject).
	Origin string `json:"origin"`
}

// CheckpointEntry is one of ListCheckpoints' entries: a(stb).
type CheckpointEntry struct {
	Name    string `json:"name"`
	Created uint64 `json:"created"` // µs since the epoch
	// Layer: the system layer is in it too.
	Layer bool `json:"layer"`
}

// ChangeEntry is one of Diff's entries: a(ssss).
type ChangeEntry struct {
	Kind    string `json:"kind"` // added, modified, deleted, renamed, metadata
	Type    string `json:"type"` // file, dir, symlink, ...
	Path    string `json:"path"`
	NewPath string `json:"new_path,omitempty"` // of a rename
}

// PromotionEntry is one of ListPromotions' entries: a(ssssssut).
type PromotionEntry struct {
	ID          string `json:"id"`
	Sandbox     string `json:"sandbox"`
	SandboxName string `json:"sandbox_name"`
	Project     string `json:"project"`
	State       string `json:"state"` // running, waiting, done, failed, rejected
	Stage       string `json:"stage"` // the stage it is at, or ended at
	Changes     uint32 `json:"changes"`
	Created     uint64 `json:"created"` // µs since the epoch
}

// TryEntry is one of Try's results: (sssbstutbs).
type TryEntry struct {
	Name, ID, Variant string
	Passed            bool
	Failed            string // which step failed and how: "check: exited 1"
	DurationUS        uint64 // the variant's and the check's time, µs
	Changes           uint32 // paths it changed
	MemoryPeak        uint64 // bytes (0: not known here)
	Kept              bool
	Output            string // the end of its output
}
