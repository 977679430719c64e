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

// TryReport is Try's result, the JSON it returns: each sandbox's result,
// in the order of the variants (or inputs), the winner's index (-1: none
// passed), and the sandboxes it meant to destroy but could not.
type TryReport struct {
	Results []TryResult `json:"results"`
	Winner  int         `json:"winner"`
	Left    []string    `json:"left,omitempty"`
}

// TryResult is how one sandbox of a Try did (sandboxctl try --json prints
// these).
type TryResult struct {
	Name    string  `json:"name"`
	ID      string  `json:"id"`
	Command string  `json:"command"`
	Input   *string `json:"input,omitempty"`
	Passed  bool    `json:"passed"`
	// Result is pass, or fail and what failed how: "fail (check: exit
	// 1)", "fail (command: signaled (SIGKILL))", "fail (command:
	// timed-out)".
	Result string `json:"result"`
	// FailedIn is "command" or "check"; How, Status and Signal are that
	// step's end, as CommandExited tells it.
	FailedIn string  `json:"failed_in,omitempty"`
	How      string  `json:"how,omitempty"`
	Status   int32   `json:"status,omitempty"`
	Signal   int32   `json:"signal,omitempty"`
	Seconds  float64 `json:"seconds"` // the command's and the check's
	// CommandSeconds and CheckSeconds are each step's part of Seconds.
	CommandSeconds float64 `json:"command_seconds"`
	CheckSeconds   float64 `json:"check_seconds"`
	// Changed is the number of paths Diff lists; nil where the pool
	// cannot tell.
	Changed *int `json:"changed"`
	// Ignored is how many changed paths the project's ignore rules left
	// out of Changed.
	Ignored int `json:"ignored,omitempty"`
	// DiskUsed is Usage's DiskUsed, bytes; nil where it is not accounted.
	DiskUsed *uint64 `json:"disk_used"`
	// MemoryPeak is Usage's MemoryPeak, bytes, read once the check
	// ended; nil where it is not counted.
	MemoryPeak *uint64 `json:"memory_peak"`
	Winner     bool    `json:"winner"`
	Kept       bool    `json:"kept"`
	// The last 64 KiB of each step's output; nil where it did not run.
	CommandOutput *string `json:"command_output,omitempty"`
	CheckOutput   *string `json:"check_output,omitempty"`
}

// ProcessEntry is one of ListProcesses' entries, a process Spawn started:
// a(sasuttsii).
type ProcessEntry struct {
	ID      string   `json:"id"`
	Argv    []string `json:"argv"`
	PID     uint32   `json:"pid"`     // inside the sandbox
	Started uint64   `json:"started"` // µs since the epoch
	Ended   uint64   `json:"ended"`   // µs since the epoch; 0 while it runs
	How     string   `json:"how"`     // how it ended (CommandExited's); "" while it runs
	Status  int32    `json:"status"`  // its exit status, as a shell gives it
	Signal  int32    `json:"signal"`  // the signal that ended it, 0 if none
}

// FileEntry is one of ListFiles' entries: a(ssuutts).
type FileEntry struct {
	// Path is the entry's path from the listed directory ("a/b"), or
	// the listed file's name.
	Path string `json:"path"`
	Kind string `json:"kind"` // file, dir, symlink, fifo, socket, device
	Mode uint32 `json:"mode"` // permission bits, with set-id and sticky
	UID  uint32 `json:"uid"`  // its owner as the sandbox sees it
	Size uint64 `json:"size"`
	// Modified is its modification time, µs since the epoch.
	Modified uint64 `json:"modified"`
	Target   string `json:"target,omitempty"` // a symlink's
}
