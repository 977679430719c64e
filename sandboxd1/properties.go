package sandboxd1

// Properties of org.sandboxd1.Sandbox, all read-only (docs/dbus-api.md
// says what each means).
const (
	PropID              = "Id"              // s
	PropName            = "Name"            // s, "" when none
	PropProject         = "Project"         // s
	PropState           = "State"           // s, emits PropertiesChanged
	PropOwner           = "Owner"           // u, the uid that created it
	PropCreated         = "Created"         // t, µs since the epoch
	PropExpires         = "Expires"         // t, µs since the epoch; 0 is none
	PropPath            = "Path"            // s
	PropUnit            = "Unit"            // s
	PropBase            = "Base"            // s
	PropProfile         = "Profile"         // s
	PropLimits          = "Limits"          // a{sv}, under CreateSandbox's option names
	PropNetwork         = "Network"         // s
	PropBoot            = "Boot"            // b: it runs a systemd of its own
	PropAllow           = "Allow"           // as
	PropReadOnlyProject = "ReadOnlyProject" // b
	// PropHostIDs: the first and last host id of its user namespace
	// (root inside is the first); empty: it has none, its root is the
	// host's.
	PropHostIDs = "HostIDs" // au
	// PropFrozenIdle: frozen for being idle ([limits] idle_freeze); the
	// next call that needs it, or connection to a port of its, thaws it.
	PropFrozenIdle = "FrozenIdle" // b
	// Live: read at each Get, never announced.
	PropStaleness = "Staleness" // s: current, stale or unknown
	PropUsage     = "Usage"     // a{sv}, the Usage* keys
)

// Keys of the Usage property; only what the host accounts is there.
const (
	UsageMemoryCurrent = "MemoryCurrent" // t, bytes
	UsageMemoryPeak    = "MemoryPeak"    // t, bytes
	UsageCPUUsageNSec  = "CPUUsageNSec"  // t
	UsageTasksCurrent  = "TasksCurrent"  // t
	UsageDiskUsed      = "DiskUsed"      // t, bytes
)

// Values of the State property.
const (
	StateCreating   = "creating"
	StateReady      = "ready"
	StateRunning    = "running"
	StateFrozen     = "frozen"
	StateStopped    = "stopped"
	StatePromoting  = "promoting"
	StateDestroying = "destroying"
)
