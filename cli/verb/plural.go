package verb

import (
	"fmt"
	"strings"
)

// Plural is n and word, plural when n is not 1: "1 change", "2 changes",
// "3 sandboxes".
func Plural[N ~int | ~int64 | ~uint32 | ~uint64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	for _, end := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(word, end) {
			return fmt.Sprintf("%d %ses", n, word)
		}
	}
	return fmt.Sprintf("%d %ss", n, word)
}
