// Package commands is the room that runs things in a sandbox for its
// callers: commands (Exec, with their signals and ends), background
// processes that outlive their call (Spawn, their logs), sessions of an
// interpreter kept between inputs (OpenSession, Eval: python3, node, sh,
// go and sql; the drivers in drivers/), the file API (ReadFile, WriteFile, ListFiles, EditFile and
// their streams) and a booted sandbox's systemctl (System). The sandbox's
// init does each (runtime/nsinit), on a request this room builds (who runs
// it, where, with what environment: request.go); this room keeps what
// runs and is under way, and tells the core when a sandbox is busy.
//
// It is made over the core's Host (New), joins its hooks (Busy, Started,
// Stopped), registers its refusals, and is the core's Runner: the core's
// own callers (promotion's checks, try) run their commands through it.
package commands
