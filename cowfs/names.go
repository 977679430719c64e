package cowfs

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen bounds a volume name: it must fit in a ZFS snapshot name
// (pool/root/name@name, 255 bytes in all) with room for the root.
const MaxNameLen = 100

// ValidateName checks a volume name: one path component of letters,
// digits, '-', '_' and '.', not starting with '.' or '-'. Anything else
// (a '/', "..", NUL, '@', spaces) is ErrInvalidName, naming the name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("volume name is empty: %w", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("volume name %.20q... is %d bytes, over %d: %w", name, len(name), MaxNameLen, ErrInvalidName)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("volume name %q starts with %q: %w", name, name[0], ErrInvalidName)
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:]) // not name[i]: 'é' is two bytes
		return fmt.Errorf("volume name %q holds %q: only letters, digits, '-', '_' and '.' are allowed: %w", name, r, ErrInvalidName)
	}
	return nil
}

// DatasetNameProblem says what is wrong with a ZFS dataset name as the
// root of sandboxd's volumes or a project ("" when nothing is): it must be
// pool/child..., of letters, digits, '_', '-', '.' and ':' joined by single
// "/", with a pool name starting with a letter, and no "@" (a snapshot).
func DatasetNameProblem(name string) string {
	parts := strings.Split(name, "/")
	switch {
	case name == "":
		return "is empty"
	case len(name) > 255:
		return "is longer than 255 bytes"
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return `starts or ends with "/"`
	case strings.Contains(name, "//"):
		return `has an empty component ("//")`
	case strings.Contains(name, "@"):
		return `has an "@" (that names a snapshot)`
	case len(parts) < 2:
		return "names a whole pool, not a dataset in one"
	case !(parts[0][0] >= 'a' && parts[0][0] <= 'z' || parts[0][0] >= 'A' && parts[0][0] <= 'Z'):
		return "has a pool name that does not start with a letter"
	}
	for _, part := range parts {
		if part == "." || part == ".." {
			return fmt.Sprintf("has a %q component", part)
		}
		if i := strings.IndexFunc(part, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:", r))
		}); i >= 0 {
			r, _ := utf8.DecodeRuneInString(part[i:])
			return fmt.Sprintf("holds %q", r)
		}
	}
	return ""
}

// ValidateDataset checks a dataset name (see DatasetNameProblem); a bad
// one is ErrInvalidName, naming it and the problem.
func ValidateDataset(name string) error {
	if problem := DatasetNameProblem(name); problem != "" {
		return fmt.Errorf("dataset name %q %s: %w", name, problem, ErrInvalidName)
	}
	return nil
}
