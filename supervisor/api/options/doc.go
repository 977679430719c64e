// Package options reads the a{sv} options of org.sandboxd1's calls
// (CreateSandbox, Try, Fork, Exec, Spawn, WriteFile, UnifiedDiff,
// AddProjectWithOptions) into the core's and rooms' types: each option
// typed and bounded, an unknown one or one of the wrong type refused by
// name, with the known ones listed. It knows nothing of the bus or of
// callers, so the front door's handlers stay thin and the parsing is
// tested and fuzzed without a testbed.
package options
