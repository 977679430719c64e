package calls

import (
	"maps"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// action is what the server must know of each call a caller can make,
// named as the server's begin is told (the method's name;
// "Properties.Get" and the like for the standard interfaces). Every
// method served is in actions: a test of supervisor/api holds the table
// to the exported methods of its objects, so that
// a new method cannot be left out of the journal or of the heavy-call
// limit.
type action struct {
	// mutating: the call changes something, and a successful one is
	// journaled (reads, which clients poll, only at debug level).
	mutating bool
	// heavy: the call holds much memory (a unified diff is built whole
	// before it is sent), takes snapshots or runs commands, and counts
	// against the heavy-call limits (limits.go).
	heavy bool
}

var actions = map[string]action{
	// org.sandboxd1.Manager
	sandboxd1.MethodCreateSandbox:         {mutating: true},
	sandboxd1.MethodListSandboxes:         {},
	sandboxd1.MethodGetSandbox:            {},
	sandboxd1.MethodFindSandbox:           {},
	sandboxd1.MethodDestroySandbox:        {mutating: true},
	sandboxd1.MethodListProjects:          {},
	sandboxd1.MethodAddProject:            {mutating: true},
	sandboxd1.MethodAddProjectWithOptions: {mutating: true},
	sandboxd1.MethodAdoptProject:          {mutating: true, heavy: true},
	sandboxd1.MethodReleaseProject:        {mutating: true, heavy: true},
	sandboxd1.MethodRemoveProject:         {mutating: true},
	sandboxd1.MethodTry:                   {mutating: true, heavy: true},
	sandboxd1.MethodListPromotions:        {},
	sandboxd1.MethodGetPromotion:          {},
	sandboxd1.MethodApprovePromotion:      {mutating: true},
	sandboxd1.MethodRejectPromotion:       {mutating: true},
	sandboxd1.MethodClearCache:            {mutating: true},
	sandboxd1.MethodGetLimits:             {},
	sandboxd1.MethodListPools:             {},

	// An approval naming the digest seen; a promotion's diff, built whole.
	sandboxd1.MethodApprovePromotionWithOptions: {mutating: true},
	sandboxd1.MethodPromotionDiff:               {heavy: true},
	// org.sandboxd1.Sandbox
	sandboxd1.MethodDestroy:          {mutating: true},
	sandboxd1.MethodFreeze:           {mutating: true},
	sandboxd1.MethodThaw:             {mutating: true},
	sandboxd1.MethodStop:             {mutating: true},
	sandboxd1.MethodStart:            {mutating: true},
	sandboxd1.MethodExec:             {mutating: true},
	sandboxd1.MethodExecTerminal:     {mutating: true},
	sandboxd1.MethodSignal:           {mutating: true},
	sandboxd1.MethodCheckpoint:       {mutating: true},
	sandboxd1.MethodListCheckpoints:  {},
	sandboxd1.MethodDeleteCheckpoint: {mutating: true},
	sandboxd1.MethodRollback:         {mutating: true},
	sandboxd1.MethodDiff:             {heavy: true},
	sandboxd1.MethodUnifiedDiff:      {heavy: true},
	sandboxd1.MethodDiffCounted:      {heavy: true},
	sandboxd1.MethodRebase:           {mutating: true},
	sandboxd1.MethodFileVersions:     {heavy: true}, // a snapshot, three files held
	sandboxd1.MethodMerge:            {mutating: true, heavy: true},
	sandboxd1.MethodProjectChanges:   {heavy: true},
	sandboxd1.MethodPromote:          {mutating: true, heavy: true},
	sandboxd1.MethodExposePort:       {mutating: true},
	sandboxd1.MethodClosePort:        {mutating: true},
	sandboxd1.MethodSpawn:            {mutating: true},
	sandboxd1.MethodListProcesses:    {},
	sandboxd1.MethodReadLog:          {},
	sandboxd1.MethodSignalProcess:    {mutating: true},
	sandboxd1.MethodOpenSession:      {mutating: true},
	sandboxd1.MethodEval:             {mutating: true},
	sandboxd1.MethodCloseSession:     {mutating: true},
	// Snapshots, and a create per fork.
	sandboxd1.MethodFork: {mutating: true, heavy: true},
	// It runs systemctl in the sandbox.
	sandboxd1.MethodSystemStatus: {heavy: true},
	// The file calls are heavy: each holds a thread of the sandbox's
	// init, and up to 16 MiB of the daemon's memory (a list, an edit, an
	// ay godbus decodes).
	sandboxd1.MethodReadFile:      {heavy: true},
	sandboxd1.MethodWriteFile:     {mutating: true, heavy: true},
	sandboxd1.MethodListFiles:     {heavy: true},
	sandboxd1.MethodEditFile:      {mutating: true, heavy: true},
	sandboxd1.MethodReadFileTo:    {heavy: true},
	sandboxd1.MethodWriteFileFrom: {mutating: true, heavy: true},
	// The standard interfaces of a sandbox's object. Set changes nothing
	// (every property is read-only) and is always refused.
	propertiesAction(sandboxd1.MethodGet):    {},
	propertiesAction(sandboxd1.MethodGetAll): {},
	propertiesAction(sandboxd1.MethodSet):    {},
	sandboxd1.MethodIntrospect:               {},
}

// propertiesAction is how a call of org.freedesktop.DBus.Properties is
// named in the journal.
func propertiesAction(method string) string { return "Properties." + method }

// Mutating says whether a successful call of action is journaled. One
// the table does not know is: better a line too many than a change
// unseen.
func Mutating(name string) bool {
	a, ok := actions[name]
	return !ok || a.mutating
}

// Heavy says whether a call of action counts against the heavy-call
// limits.
func Heavy(name string) bool { return actions[name].heavy }

// Known says whether the table has a call named name.
func Known(name string) bool {
	_, ok := actions[name]
	return ok
}

// Names lists the calls the table has, sorted.
func Names() []string { return slices.Sorted(maps.Keys(actions)) }

// HeavyNames lists the heavy calls, for messages.
func HeavyNames() string {
	var names []string
	for name, a := range actions {
		if a.heavy {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
