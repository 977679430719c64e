package api

import (
	"github.com/sandboxd/sandboxd/supervisor/adopt"
	"github.com/sandboxd/sandboxd/supervisor/caches"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"github.com/sandboxd/sandboxd/supervisor/limits"
	"github.com/sandboxd/sandboxd/supervisor/metrics"
	"github.com/sandboxd/sandboxd/supervisor/pool"
	"github.com/sandboxd/sandboxd/supervisor/ports"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// Rooms are the supervisor's capabilities the front door serves beside
// its core, each made over the core's Host (cmd/sandboxd wires them).
// A nil room is not served: its methods answer that it is not there.
type Rooms struct {
	// The exposed ports (ExposePort, ClosePort).
	Ports *ports.Ports

	// The owners' caches (ClearCache).
	Caches *caches.Caches

	// Commands, background processes, sessions and files.
	Commands *commands.Commands

	// Checkpoints, rollback, rebase and diff.
	Checkpoints *checkpoints.Checkpoints

	// Promotions (Promote, Approve, Reject, the records).
	Promotion *promotion.Promotions

	// Adoption (AdoptProject, ReleaseProject).
	Adoptions *adopt.Adoptions

	// Try.
	Try *try.Try

	// Forks of a sandbox (Fork).
	Forks *fork.Forks

	// The bounds over many sandboxes and their use (GetLimits).
	Limits *limits.Limits

	// The warm pools (ListPools; nil: none configured).
	Pools *pool.Pools

	// The metrics: CreateSandbox's latency (nil: not measured).
	Metrics *metrics.Metrics
}
