package sandboxd1

// Conflicts an agent can resolve (issue 33), on org.sandboxd1.Sandbox:
//
//	FileVersions(s path, a{sv} options) → (a(sstbbays) versions)
//	Merge(s path, a{sv} options) → (b clean, b written, a(uuuuuusss) hunks, ay merged)
//
// path is relative to the project's top, as a conflict names it.
// FileVersions returns the base's, the project's (as it is now) and the
// sandbox's version, in that order; its option MaxBytes (t) bounds each
// (at most and by default MaxVersionBytes). Merge merges the project's
// change since the base into the sandbox's version (diff3) and writes a
// clean result into the sandbox as the caller; a conflicting one is
// left alone unless Markers. Both are new methods: Diff's and Rebase's
// signatures stay as published.
const (
	MethodFileVersions = "FileVersions"
	MethodMerge        = "Merge"
)

// Options of Merge's a{sv}.
const (
	OptMarkers = "Markers" // b: write a conflicting merge with conflict markers
	OptDryRun  = "DryRun"  // b: write nothing, say what the merge gives
)

// MaxVersionBytes bounds each version FileVersions reads, and the files
// Merge merges.
const MaxVersionBytes = 1 << 20

// The versions, in FileVersions' order.
const (
	VersionBase    = "base"
	VersionProject = "project"
	VersionSandbox = "sandbox"
)

// The kinds of a version: only a file has content.
const (
	VersionFile       = "file"
	VersionAbsent     = "absent"     // nothing there: deleted, or never made
	VersionSymlink    = "symlink"    // at the path or on the way: never followed
	VersionDirectory  = "directory"  // a directory
	VersionOther      = "other"      // a fifo, socket or device: never opened
	VersionUnreadable = "unreadable" // the caller could not read it on the host
)

// FileVersion is one of FileVersions' entries: (sstbbays).
type FileVersion struct {
	Which     string `json:"which"` // base, project, sandbox
	Kind      string `json:"kind"`
	Size      uint64 `json:"size"`
	Binary    bool   `json:"binary"`    // the bytes read hold a NUL
	Truncated bool   `json:"truncated"` // the file is larger than Data
	Data      []byte `json:"data"`
	Note      string `json:"note,omitempty"` // why there is no content
}

// MergeHunk is one of Merge's conflicting hunks: (uuuuuusss), each
// version's lines (Lines lines from Start, the first 1; Lines 0: a place
// after line Start) and text.
type MergeHunk struct {
	SandboxStart uint32 `json:"sandbox_start"`
	SandboxLines uint32 `json:"sandbox_lines"`
	BaseStart    uint32 `json:"base_start"`
	BaseLines    uint32 `json:"base_lines"`
	ProjectStart uint32 `json:"project_start"`
	ProjectLines uint32 `json:"project_lines"`
	Sandbox      string `json:"sandbox"` // the sandbox's text there
	Base         string `json:"base"`
	Project      string `json:"project"`
}
