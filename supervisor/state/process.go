package state

// Process is a declared background process: what its spawn asked, as
// the commands room spawns it again.
type Process struct {
	Argv   []string `json:"argv"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	UID    uint32   `json:"uid"`
	AsRoot bool     `json:"as_root,omitempty"`
	// ID is the background process its last spawn made ("": none runs).
	ID string `json:"id,omitempty"`
}
