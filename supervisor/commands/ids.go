package commands

import (
	"crypto/rand"
	"encoding/hex"
)

// newID is a short random id: a command's, a process's, a session's.
func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
