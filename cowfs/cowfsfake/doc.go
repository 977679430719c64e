// Package cowfsfake is a cowfs.Backend over plain directories, for tests
// of the supervisor's rooms that run without root, btrfs or ZFS (as
// Incus's backend_mock.go stands in for its storage drivers).
//
// A volume is a directory: sandboxd's directly under the root, a project
// anywhere below the pool (the root's parent directory) once MakeProject
// made it. A snapshot copies the tree (modes, owners where the process
// may set them, symlinks, hard links, times); what a volume is (its kind,
// origin, creation, quota, the identity of its files) is the fake's own
// bookkeeping, kept in memory and in a small JSON file in the root, so a
// Backend opened again on the same root finds its volumes. It passes
// cowfstest.Run for every capability it claims.
//
// What it does not do, and says so in Info().Capabilities:
//   - no copy-on-write: a snapshot costs the size of its source;
//   - no read-only mount: a read-only snapshot is read-only in the
//     bookkeeping (Rollback and Send treat it so) and its top directory
//     is mode 0555, which stops another user than root from adding,
//     renaming or removing entries there, not from writing its files;
//   - no quota (Quota, GroupQuota false): SetQuota records the limit,
//     which Usage reports, and nothing enforces it; GroupQuota refuses;
//   - no reflinks across volumes, no overlayfs upper or idmapped mount
//     promised, no mounts of its own;
//   - Changes and ChangedSince read both trees (FastChanges false): a
//     file is known across snapshots by an identity the fake gives it
//     (inode and birth time, carried over by each copy), so renames show
//     as renames; a change of times or xattrs alone is not seen;
//   - Send and Receive use a stream of the fake's own (a tar archive,
//     checksummed), which only the fake reads.
//
// Fail and SetHook make a call fail on purpose, for tests of what a
// caller undoes.
package cowfsfake
