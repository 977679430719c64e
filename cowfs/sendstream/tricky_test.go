package sendstream_test

import (
	"bytes"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// Changes the kernel sends through orphan names, links and unlinks: swaps
// and cycles of renames, a directory deleted while a child moves out, an
// existing directory moved into a new one, entries replaced by others of
// another type, one of two hard links removed.
func TestChangesOfSwapsCyclesAndReplacements(t *testing.T) {
	vol := subvolume(t, "tricky")
	f := files{t, vol}
	f.write("swap1", []byte("1"))
	f.write("swap2", []byte("2"))
	f.write("r1", []byte("r1"))
	f.write("r2", []byte("r2"))
	f.write("r3", []byte("r3"))
	f.write("olddir/keep", []byte("k"))
	f.write("olddir/gone", []byte("g"))
	f.write("inner/deep/f", []byte("f"))
	f.write("x/in", []byte("x"))
	f.write("y", []byte("y"))
	f.write("h1", []byte("h"))
	f.link("h1", "h2")
	f.write("p/c", []byte("c"))
	base := snapshot(t, vol, "tricky-base")

	f.rename("swap1", "tmp")
	f.rename("swap2", "swap1")
	f.rename("tmp", "swap2")
	f.rename("r1", "tmp")
	f.rename("r3", "r1")
	f.rename("r2", "r3")
	f.rename("tmp", "r2")
	f.rename("olddir/keep", "kept")
	f.remove("olddir")
	f.mkdir("outer")
	f.rename("inner", "outer/inner")
	f.remove("x")
	f.write("x", []byte("now a file"))
	f.remove("y")
	f.write("y/z", []byte("now a dir"))
	f.remove("h1")
	f.rename("p/c", "c2")
	f.rename("p", "p2")
	snap := snapshot(t, vol, "tricky-snap")

	got, err := sendstream.Changes(bytes.NewReader(send(t, snap, "-p", base)))
	if err != nil {
		t.Fatal(err)
	}
	sameChanges(t, got, []cowfs.Change{
		{Path: "h1", Kind: cowfs.Deleted},
		// The stream does not say h2 was h1's other name, only that h2's
		// ctime moved.
		{Path: "h2", Kind: cowfs.Metadata},
		{Path: "inner", NewPath: "outer/inner", Kind: cowfs.Renamed},
		{Path: "olddir", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "olddir/gone", Kind: cowfs.Deleted},
		{Path: "olddir/keep", NewPath: "kept", Kind: cowfs.Renamed},
		{Path: "outer", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "p", NewPath: "p2", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
		{Path: "p/c", NewPath: "c2", Kind: cowfs.Renamed},
		{Path: "r1", NewPath: "r2", Kind: cowfs.Renamed},
		{Path: "r2", NewPath: "r3", Kind: cowfs.Renamed},
		{Path: "r3", NewPath: "r1", Kind: cowfs.Renamed},
		{Path: "swap1", NewPath: "swap2", Kind: cowfs.Renamed},
		{Path: "swap2", NewPath: "swap1", Kind: cowfs.Renamed},
		{Path: "x", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "x/in", Kind: cowfs.Deleted},
		{Path: "y", Kind: cowfs.Modified, Type: cowfs.TypeDir},
		{Path: "y/z", Kind: cowfs.Added, Type: cowfs.TypeFile},
	})
}
