package sandboxd1

// D-Bus error names the API answers with. Bad input uses the standard
// InvalidArgs, which godbus already sends for a call of the wrong
// signature, so a client has one name for every kind of bad input.
const (
	ErrorAccessDenied  = "org.sandboxd1.Error.AccessDenied"
	ErrorNoSuchSandbox = "org.sandboxd1.Error.NoSuchSandbox"
	ErrorNoSuchProject = "org.sandboxd1.Error.NoSuchProject"
	ErrorInvalidArgs   = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrorFailed        = "org.sandboxd1.Error.Failed"
	// ErrorLimitReached: admission control refused a create (too many
	// sandboxes for the host or the caller, or too much memory promised).
	ErrorLimitReached = "org.sandboxd1.Error.LimitReached"
	// ErrorWrongState: the sandbox's state does not allow the call (Thaw
	// of a sandbox that is not frozen).
	ErrorWrongState = "org.sandboxd1.Error.WrongState"
	// ErrorStopped: the sandbox is stopped (Stop, or stopped for being
	// idle by a caller's choice); Start it first.
	ErrorStopped = "org.sandboxd1.Error.Stopped"
	// ErrorNoSuchCheckpoint: the sandbox has no checkpoint of that name.
	ErrorNoSuchCheckpoint = "org.sandboxd1.Error.NoSuchCheckpoint"
	// ErrorNoSuchCommand: Signal names no running command of the sandbox.
	ErrorNoSuchCommand = "org.sandboxd1.Error.NoSuchCommand"
	// ErrorExists: the name is taken, by another sandbox (CreateSandbox's
	// Name) or project (AddProject).
	ErrorExists = "org.sandboxd1.Error.Exists"
	// ErrorConflict: a promotion's change set and the project's own
	// changes since the sandbox's base touch the same paths.
	ErrorConflict = "org.sandboxd1.Error.Conflict"
	// ErrorBusy: another promotion of the same project is under way; or
	// an Eval's session has as many inputs waiting as it may (or its
	// owner's inputs hold as many bytes as they may): refused at once.
	ErrorBusy = "org.sandboxd1.Error.Busy"
	// ErrorNoSuchPromotion: no promotion of that id that the caller may see.
	ErrorNoSuchPromotion = "org.sandboxd1.Error.NoSuchPromotion"
	// ErrorNoIdmap: root inside the sandbox was asked for by a caller
	// other than root, and the sandbox has no user namespace of its own
	// (the pool, the kernel or the root layers cannot idmap, or
	// sandbox.userns is off): root there would be the host's.
	ErrorNoIdmap = "org.sandboxd1.Error.NoIdmap"
	// ErrorNoSuchFile: the file API's path names nothing in the sandbox
	// (or a directory on its way is not one).
	ErrorNoSuchFile = "org.sandboxd1.Error.NoSuchFile"
	// ErrorNoProgram: Exec's, ExecTerminal's or Spawn's program is not in
	// the sandbox (not in its PATH, or no such file), as the command's
	// user sees it; a shell exits 127 for it (sandboxctl exec does).
	ErrorNoProgram = "org.sandboxd1.Error.NoProgram"
	// ErrorNotExecutable: the program is there but cannot be run (no
	// permission, a directory, a format the kernel does not run); a shell
	// exits 126 (sandboxctl exec does).
	ErrorNotExecutable = "org.sandboxd1.Error.NotExecutable"
)

// Standard errors (D-Bus specification) the API and its clients meet.
const (
	ErrorUnknownObject    = "org.freedesktop.DBus.Error.UnknownObject"
	ErrorUnknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
	ErrorUnknownProperty  = "org.freedesktop.DBus.Error.UnknownProperty"
	ErrorPropertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
	ErrorBusAccessDenied  = "org.freedesktop.DBus.Error.AccessDenied"
	ErrorServiceUnknown   = "org.freedesktop.DBus.Error.ServiceUnknown"
	ErrorNameHasNoOwner   = "org.freedesktop.DBus.Error.NameHasNoOwner"
)
