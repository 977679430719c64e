// Package admission is the supervisor's admission policy, as pure logic:
// what a create gets that it did not ask for (its profile's settings, the
// policy's time to live and MemoryMax, the limits derived from the host)
// and whether the host can take it (the caps on sandboxes, per host and
// per owner, and on the memory promised; the owner's oldest sandboxes to
// destroy first when DestroyOldest says so).
//
// It holds no state and takes no lock: the core's Create calls it under
// its admission lock with the live records (supervisor/state) and does
// what it decides (records, evicts, refuses). Its sentinels are the
// core's: supervisor.ErrInvalid and supervisor.ErrLimitReached are
// ErrInvalid and ErrLimitReached of this package.
package admission
