package sandboxd1

import "time"

// The daemon's defaults for what a call leaves out, one constant both
// ends read: the daemon applies them, sandboxctl's --help says them
// rather than a zero that is not what happens.
const (
	// DefaultTTL is a sandbox's time to live when neither its create nor
	// its profile sets one and sandboxd.toml's limits.default_ttl is not
	// set.
	DefaultTTL = 24 * time.Hour
	// DefaultTasksMax is a sandbox's TasksMax when neither its create nor
	// its profile sets one and limits.default_tasks_max is not set (less
	// on a host whose pid_max/8 is less).
	DefaultTasksMax = 4096
	// DefaultTryTimeout bounds each of Try's variants and checks when its
	// options set no Timeout.
	DefaultTryTimeout = 10 * time.Minute
)
