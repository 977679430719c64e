// Package fsat holds the small file system calls by descriptor that the
// daemon's walks share (adopt's copy, promote's apply, nsinit's file
// service): each acts at a directory descriptor and a name, never by a
// path a tenant could swap on the way; and the permission check by a
// file's mode that the walks made for a user share (Permits).
package fsat

import "golang.org/x/sys/unix"

// Readlink reads the target of the symlink name in dir ("" for dir
// itself, an O_PATH descriptor of the link opened not followed), whole
// however long it is.
func Readlink(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// Openat2 is unix.Openat2, tried again (16 times at most) when a signal
// interrupted it or, for a lookup confined to dir, a rename or mount
// anywhere raced it (EAGAIN).
func Openat2(dir int, name string, how *unix.OpenHow) (int, error) {
	for try := 0; ; try++ {
		fd, err := unix.Openat2(dir, name, how)
		if (err == unix.EINTR || err == unix.EAGAIN) && try < 16 {
			continue
		}
		return fd, err
	}
}
