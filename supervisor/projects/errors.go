package projects

import "errors"

// The registry's refusals. The core names them too (supervisor's
// ErrAccessDenied, ErrUnknownProject, ...: the same values), so that
// errors.Is holds on either name.
var (
	// ErrAccessDenied: the caller may not use the project (make a
	// sandbox of it, promote into it).
	ErrAccessDenied = errors.New("access denied")
	// ErrUnknownProject: no project of that name (configured or added).
	ErrUnknownProject = errors.New("unknown project")
	// ErrExists: the name is taken, by another sandbox (a create's name)
	// or another project (Add).
	ErrExists = errors.New("name taken")
	// ErrInvalidProject: an Add or Remove that cannot be done as asked:
	// a bad name, a location that is not a volume of the pool, the
	// removal of a project of the configuration.
	ErrInvalidProject = errors.New("invalid project")
	// ErrProjectInUse: Remove of a project that has sandboxes.
	ErrProjectInUse = errors.New("project in use")
)
