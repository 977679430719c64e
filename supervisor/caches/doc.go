// Package caches is the room of the owners' caches kept across
// sandboxes: each owner has one volume, cache-u<uid>, made on first
// need, that every sandbox of that owner (and no one else's) sees
// read-write at nsinit.CachePath, where the variables of cacheEnv send
// pip, npm, Go and cargo. Its quota (Config.Quota) bounds what all of
// the owner's sandboxes put there together. It is not under the
// project: checkpoints, diffs and promotions never see it, and a
// destroy keeps it. A cache is a convenience: a sandbox whose cache
// cannot be had is made without one. Where a copy into a volume escapes
// its quota (btrfs reflinks), a cache with a quota is a filesystem of
// its own instead (image.go).
//
// The room joins the core's hooks (New): before a sandbox's init is
// launched its owner's cache is made, the init's spec gets its path
// (the owner's lock held shared until the init built its world), and
// the commands of a sandbox whose init has it mounted get cacheEnv.
// Clear empties an owner's cache (sandboxctl cache clear).
package caches
