package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
)

// Images a command or a session made, returned as image content: the
// files exec's images names once the command ended, and the figures a
// python3 session's matplotlib drew. Each is read through the client as
// the caller, bounded by MaxFileBytes, and known by its first bytes.

// maxImages bounds the images one call returns.
const maxImages = 8

// figuresInput starts the control input a python3 session's driver
// answers with the figures it kept (see drivers/python3.py): \x01 starts
// no Python source anyone writes, and D-Bus strings may hold it.
const figuresInput = "\x01sandboxd-figures "

// imageType is the MIME type of an image by its magic bytes: PNG, JPEG,
// GIF or WebP ("" for anything else).
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// attachImages reads the images a command wrote (paths in the
// sandbox) and adds each to the call's result; what cannot be returned
// is a note naming it and why.
func (s *server) attachImages(ctx context.Context, sb *client.Sandbox, paths []string, root bool) []string {
	var notes []string
	if len(paths) > maxImages {
		notes = append(notes, fmt.Sprintf("images names %d files: only the first %d are returned", len(paths), maxImages))
		paths = paths[:maxImages]
	}
	for _, p := range paths {
		if note := s.attachImage(ctx, sb, p, root); note != "" {
			notes = append(notes, note)
		}
	}
	return notes
}

// attachImage adds one image file to the call's result; it returns why
// it could not ("" when it did).
func (s *server) attachImage(ctx context.Context, sb *client.Sandbox, p string, root bool) string {
	data, err := sb.ReadFile(ctx, p, client.ReadOptions{Limit: int64(s.opts.MaxFileBytes), Root: root})
	switch {
	case errors.Is(err, client.ErrTooLarge):
		return fmt.Sprintf("image %s is over the %d bytes this server returns: not returned; make it smaller (fewer pixels, JPEG)", p, s.opts.MaxFileBytes)
	case err != nil:
		return fmt.Sprintf("image %s: %v", p, err)
	}
	mt := imageType(data)
	if mt == "" {
		return fmt.Sprintf("%s is not a PNG, JPEG, GIF or WebP image (by its first bytes): not returned", p)
	}
	toolcall.Attach(ctx, &mcp.ImageContent{Data: data, MIMEType: mt})
	return ""
}

// replFigures adds the figures the input key's python3 session just ran
// drew (plt.show(), or left open) to the call's result. Its driver
// keeps them and, asked by a control input (figuresInput, which no
// Python source starts with), writes them as PNGs to a directory of the
// session's own under the sandbox's /tmp (emptied first) and names
// them; they are read from there as the caller.
func (s *server) replFigures(ctx context.Context, sb *client.Sandbox, key replKey) []string {
	if key.language != "python3" {
		return nil
	}
	s.repl.mu.Lock()
	id := s.repl.open[key].id
	s.repl.mu.Unlock()
	if id == "" || strings.Trim(id, "0123456789abcdefABCDEF-") != "" {
		return nil
	}
	dir := "/tmp/sandboxd-figures-" + id
	listing, status, err := sb.Eval(ctx, id, figuresInput+dir)
	if err != nil || status != 0 || listing == "" {
		return nil // matplotlib drew nothing (or is not there)
	}
	var paths []string
	for _, name := range strings.Split(strings.TrimSpace(listing), "\n") {
		if strings.HasPrefix(name, "figure-") && strings.HasSuffix(name, ".png") && !strings.Contains(name, "/") {
			paths = append(paths, path.Join(dir, name))
		}
	}
	slices.SortFunc(paths, cmpNatural)
	return s.attachImages(ctx, sb, paths, false)
}

// cmpNatural orders figure-2.png before figure-10.png.
func cmpNatural(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// randomHex is n random bytes as hex, for names no other call takes.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
