package sandboxd1

// ListPools() → s: the warm pools the caller may see (its own; root and
// admins every owner's), a JSON array of Pool.
const MethodListPools = "ListPools"

// Pool is one warm pool in ListPools' answer: the ready sandboxes owner
// keeps of project, which his creates like the last one claim.
type Pool struct {
	Project string `json:"project"`
	Owner   uint32 `json:"owner"`
	// Size is the pool's size (limits.pool, or the project's pool).
	Size int `json:"size"`
	// Ready sandboxes, and Making (0 or 1) one being made.
	Ready  int `json:"ready"`
	Making int `json:"making"`
	// Claims: creates that got a ready sandbox; Misses: creates that
	// found none, or asked for other options; Stale: ready sandboxes
	// destroyed unclaimed because the project was written since.
	Claims uint64 `json:"claims"`
	Misses uint64 `json:"misses"`
	Stale  uint64 `json:"stale"`
	// Blocked says why the pool is not being refilled now (a bound
	// reached, files of the project open for writing); "": it is.
	Blocked string `json:"blocked,omitempty"`
}
