package unidiff

import "errors"

// ErrUnsafePath: a change names a path that leaves its tree (a "..", an
// absolute or unclean path); Write refuses the whole list before writing
// anything.
var ErrUnsafePath = errors.New("unsafe path")
