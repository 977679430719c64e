package fsat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadlink(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a/", 700) + "end" // over the first buffer
	for name, target := range map[string]string{"short": "x", "long": long, "edge": strings.Repeat("b", 256)} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	for name, want := range map[string]string{"short": "x", "long": long, "edge": strings.Repeat("b", 256)} {
		got, err := Readlink(d, name)
		if err != nil || got != want {
			t.Errorf("Readlink(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	// "" reads the link an O_PATH descriptor is.
	l, err := unix.Open(filepath.Join(dir, "short"), unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(l)
	if got, err := Readlink(l, ""); err != nil || got != "x" {
		t.Errorf("Readlink(fd, \"\") = %q, %v; want \"x\"", got, err)
	}
	if _, err := Readlink(d, "missing"); err == nil {
		t.Error("Readlink of a missing name: no error")
	}
}
