package toolcall

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// Images a command or a session made, returned as image content, each
// read through the client as the caller and known by its first bytes.

// MaxImages bounds the images one call returns.
const MaxImages = 8

// ImageType is the MIME type of an image by its magic bytes: PNG, JPEG,
// GIF or WebP ("" for anything else).
func ImageType(b []byte) string {
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

// AttachImages reads images a command or a session wrote (paths in
// sb, as the caller or its root, each at most max bytes, at most
// MaxImages) and adds each to ctx's call's result; what cannot be
// returned is a note naming it and why.
func AttachImages(ctx context.Context, sb *client.Sandbox, paths []string, root bool, max int) []string {
	var notes []string
	if len(paths) > MaxImages {
		notes = append(notes, fmt.Sprintf("images names %d files: only the first %d are returned", len(paths), MaxImages))
		paths = paths[:MaxImages]
	}
	for _, p := range paths {
		if note := attachImage(ctx, sb, p, root, max); note != "" {
			notes = append(notes, note)
		}
	}
	return notes
}

// attachImage adds one image file to the call's result; it returns why
// it could not ("" when it did).
func attachImage(ctx context.Context, sb *client.Sandbox, p string, root bool, max int) string {
	data, err := sb.ReadFile(ctx, p, client.ReadOptions{Limit: int64(max), Root: root})
	switch {
	case errors.Is(err, client.ErrTooLarge):
		return fmt.Sprintf("image %s is over the %d bytes this server returns: not returned; make it smaller (fewer pixels, JPEG)", p, max)
	case err != nil:
		return fmt.Sprintf("image %s: %v", p, err)
	}
	mt := ImageType(data)
	if mt == "" {
		return fmt.Sprintf("%s is not a PNG, JPEG, GIF or WebP image (by its first bytes): not returned", p)
	}
	Attach(ctx, &mcp.ImageContent{Data: data, MIMEType: mt})
	return ""
}
