//go:build !amd64 && !arm64

package seccomp

// nativeArch is zero: Install refuses to run on this architecture.
const nativeArch = 0

const x32Bit = 0

var archDenied []syscallName
