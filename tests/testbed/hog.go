package testbed

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
)

// Hog is a helper process for memory-limit tests: it waits for a line on
// stdin (so a test can put it into a scope first), allocates and touches
// mib MiB, prints "allocated N MiB", and holds the memory until stdin
// closes. A test binary runs it from its TestMain, in a re-executed copy
// of itself. It returns the process's exit status.
func Hog(mib int) int {
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "hog: waiting for go:", err)
		return 2
	}
	var chunks [][]byte
	for range mib {
		c := make([]byte, 1<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1 // touch every page, so the memory is really used
		}
		chunks = append(chunks, c)
	}
	fmt.Printf("allocated %d MiB\n", len(chunks))
	_, _ = io.Copy(io.Discard, in)
	runtime.KeepAlive(chunks)
	return 0
}
