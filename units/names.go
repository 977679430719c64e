package units

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// maxUnitName is systemd's UNIT_NAME_MAX less the terminating NUL.
const maxUnitName = 255

// checkName refuses a unit name systemd would refuse, or one not of the
// given type (".scope", ".slice"), before anything is asked of systemd. It
// allows the characters of a plain unit name only: letters, digits, ":",
// "_", "." and "-" (no "/", no "\" escapes, no "@" instances), so that a
// name made from a sandbox id can never reach outside its own unit.
func checkName(name, suffix string) error {
	prefix, ok := strings.CutSuffix(name, suffix)
	switch {
	case !ok:
		return fmt.Errorf("%w: %q does not end in %q", ErrInvalidName, name, suffix)
	case prefix == "":
		return fmt.Errorf("%w: %q has nothing before %q", ErrInvalidName, name, suffix)
	case len(name) > maxUnitName:
		return fmt.Errorf("%w: %q is %d bytes long; systemd allows %d", ErrInvalidName, name, len(name), maxUnitName)
	}
	for _, c := range prefix {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(":_.-", c)) {
			return fmt.Errorf("%w: %q holds %q; a unit name holds only letters, digits, \":\", \"_\", \".\" and \"-\"", ErrInvalidName, name, c)
		}
	}
	return nil
}

// CheckScopeName says whether name is a unit name this package will start
// or act on: a plain systemd unit name that ends in ".scope", such as
// "sandbox-1f3a.scope". The error wraps ErrInvalidName.
func CheckScopeName(name string) error { return checkName(name, ".scope") }

// CheckSliceName says whether name is a slice's name this package will
// start or read: a plain systemd unit name that ends in ".slice". The
// error wraps ErrInvalidName.
func CheckSliceName(name string) error { return checkName(name, ".slice") }

// OwnerSlice is the slice a scope of user uid's goes in:
// "sandboxd-u<uid>.slice", which systemd places under sandboxd.slice (a
// "-" in a slice's name is a level of the tree), so that each user's
// sandboxes are one cgroup, and all of them another.
func OwnerSlice(uid uint32) string { return fmt.Sprintf("sandboxd-u%d.slice", uid) }

// OwnerSlices is the pattern of every OwnerSlice, for List; it matches
// their ScopeSlice children too, which IsOwnerSlice tells apart.
const OwnerSlices = "sandboxd-u*.slice"

// ScopeBuckets is how many slices of its owner's the scopes of one user's
// sandboxes are spread over (ScopeSlice).
const ScopeBuckets = 32

// ScopeSlice is the slice scope (a sandbox's, of user uid's) goes in: one
// of ScopeBuckets children of OwnerSlice(uid), chosen by the scope's
// name, "sandboxd-u<uid>-<n>.slice". The owner's bounds still hold all of
// them. systemd's start of a scope does work for each of its siblings
// (it realizes their cgroups with the new one's): with 1,000 scopes in
// one slice, each start took 10 ms more than the first (issue 20).
func ScopeSlice(uid uint32, scope string) string {
	h := fnv.New32a()
	h.Write([]byte(scope))
	return fmt.Sprintf("sandboxd-u%d-%d.slice", uid, h.Sum32()%ScopeBuckets)
}

// IsOwnerSlice reports whether name is an OwnerSlice (not one of its
// ScopeSlice children).
func IsOwnerSlice(name string) bool {
	n, ok := strings.CutPrefix(name, "sandboxd-u")
	if !ok {
		return false
	}
	n, ok = strings.CutSuffix(n, ".slice")
	if !ok {
		return false
	}
	uid, err := strconv.ParseUint(n, 10, 32)
	return err == nil && OwnerSlice(uint32(uid)) == name
}
