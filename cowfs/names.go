package cowfs

import (
	"fmt"
	"strings"
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
		return fmt.Errorf("volume name %q holds %q: only letters, digits, '-', '_' and '.' are allowed: %w", name, name[i], ErrInvalidName)
	}
	return nil
}
