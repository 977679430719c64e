package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// These use the file API (ReadFile, WriteFile, ListFiles, EditFile).

func TestAFileLargerThanAChunkGoesBothWays(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	data := make([]byte, 2*sandboxd1.MaxFileChunk+12345)
	rand.Read(data)
	if err := sb.WriteFile(ctx, "big.bin", data, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// As a command in the sandbox sees it.
	out, _, st, err := sb.Output(ctx, []string{"sha256sum", "big.bin"}, client.ExecOptions{})
	if want := fmt.Sprintf("%x  big.bin\n", sha256.Sum256(data)); err != nil || !st.Success() || string(out) != want {
		t.Fatalf("sha256sum of what WriteFile wrote: %q, %v, %v; want %q", out, st, err, want)
	}
	back, err := sb.ReadFile(ctx, "big.bin", client.ReadOptions{Limit: int64(len(data))})
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("ReadFile gave %d bytes back (%v); want the %d written", len(back), err, len(data))
	}
	if _, err := sb.ReadFile(ctx, "big.bin", client.ReadOptions{Limit: int64(len(data)) - 1}); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("ReadFile bounded one byte short: %v; want ErrTooLarge", err)
	}
	if err := sb.WriteFileAt(ctx, "big.bin", sandboxd1.MaxFileChunk-2, []byte("ABCD"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	copy(data[sandboxd1.MaxFileChunk-2:], "ABCD")
	// More than one call's worth: in two calls, the second short.
	part, err := sb.ReadFileAt(ctx, "big.bin", 5, sandboxd1.MaxFileChunk+10)
	if want := data[5 : 5+sandboxd1.MaxFileChunk+10]; err != nil || !bytes.Equal(part, want) {
		t.Errorf("ReadFileAt of %d bytes from 5 after WriteFileAt: %d bytes, %v; want bytes 5 to %d of the file, ABCD at %d",
			len(want), len(part), err, 5+len(want), sandboxd1.MaxFileChunk-2)
	}
	tail, err := sb.ReadFileAt(ctx, "big.bin", uint64(len(data))-3, 100)
	if err != nil || !bytes.Equal(tail, data[len(data)-3:]) {
		t.Errorf("ReadFileAt of 100 bytes 3 before the end: %q, %v; want the last 3", tail, err)
	}
}

func TestFileErrorsSayWhatWasDoneToWhat(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	_, err := sb.ReadFile(ctx, "no-such-file", client.ReadOptions{})
	if !errors.Is(err, client.ErrNoSuchFile) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no-such-file") {
		t.Errorf("ReadFile of a missing file: %v (%s); want ErrNoSuchFile (and fs.ErrNotExist) naming it", err, errorName(err))
	}
	if err := sb.WriteFile(ctx, "no-such-dir/a", []byte("x"), client.WriteOptions{}); !errors.Is(err, client.ErrNoSuchFile) {
		t.Errorf("WriteFile into a missing directory: %v (%s); want ErrNoSuchFile", err, errorName(err))
	}
	if _, err := sb.EditFile(ctx, "index.html", "not in it", "x"); !errors.Is(err, client.ErrInvalidArgs) {
		t.Errorf("EditFile of text the file does not have: %v (%s); want ErrInvalidArgs", err, errorName(err))
	}
	if _, err := sb.EditFile(ctx, "index.html", "", "x"); !errors.Is(err, client.ErrInvalidArgs) {
		t.Errorf("EditFile of empty text: %v; want ErrInvalidArgs", err)
	}
	if _, err := sb.ListFiles(ctx, "/etc", client.ListOptions{Recursive: true, MaxEntries: 3}); err == nil {
		t.Error("ListFiles of /etc at most 3 entries: no error")
	}
}
