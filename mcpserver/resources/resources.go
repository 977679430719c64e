// Package resources serves a sandbox's files, its diff and a background
// process's log as MCP resources (resources/read on three templates),
// each read as the server's user through the Go client, as the tools
// are, and bounded by the server's cap. The MCP server (mcpserver) adds
// them and links to them from a tool's result when the tool returned
// less than there is.
package resources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

const (
	scheme = "sandbox://"
	// The templates: a path may hold slashes ({+path}); a relative path
	// starts at the project's directory, an absolute one
	// (sandbox://ID/files//etc/hosts) at the sandbox's root.
	FilesTemplate = scheme + "{sandbox}/files/{+path}"
	DiffTemplate  = scheme + "{sandbox}/diff"
	LogsTemplate  = scheme + "{sandbox}/logs/{process}"
)

// Finder finds the sandbox a URI names (its id, name or id's start).
type Finder func(ctx context.Context, sandbox string) (*client.Sandbox, error)

type server struct {
	find Finder
	max  int
}

// Add adds the three templates to m; find finds a sandbox, max bounds
// what one read returns.
func Add(m *mcp.Server, find Finder, max int) {
	s := &server{find, max}
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-file", Title: "A file of a sandbox", URITemplate: FilesTemplate,
		Description: fmt.Sprintf("A file of a sandbox, as you see it there (at most %d KiB; file_read reads a larger one in parts). Text as text, other bytes as a blob.", max>>10)},
		s.readFile)
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-diff", Title: "A sandbox's changes as a unified diff", URITemplate: DiffTemplate, MIMEType: "text/x-diff",
		Description: fmt.Sprintf("What a sandbox changed since it was made, as a unified diff (cut after %d KiB).", max>>10)},
		s.readDiff)
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-log", Title: "A background process's output", URITemplate: LogsTemplate, MIMEType: "text/plain",
		Description: fmt.Sprintf("The output of a process spawn started, stdout and stderr together, from its start (at most %d KiB; logs reads on from an offset).", max>>10)},
		s.readLog)
}

// URI is what a sandbox:// URI names: the sandbox, the kind (files,
// diff, logs) and the rest (a path, a process).
type URI struct {
	Sandbox, Kind, Rest string
}

// Parse reads a sandbox:// URI.
func Parse(uri string) (URI, error) {
	body, ok := strings.CutPrefix(uri, scheme)
	if !ok {
		return URI{}, fmt.Errorf("resource %q is not a %s URI", uri, scheme)
	}
	if i := strings.IndexAny(body, "?#"); i >= 0 {
		body = body[:i]
	}
	sandbox, rest, _ := strings.Cut(body, "/")
	kind, rest, _ := strings.Cut(rest, "/")
	var err error
	r := URI{Kind: kind}
	if r.Sandbox, err = url.PathUnescape(sandbox); err != nil || r.Sandbox == "" {
		return URI{}, fmt.Errorf("resource %q names no sandbox: give sandbox://SANDBOX/files/PATH, /diff or /logs/PROCESS", uri)
	}
	if r.Rest, err = url.PathUnescape(rest); err != nil {
		return URI{}, fmt.Errorf("resource %q: its path is not escaped right: %w", uri, err)
	}
	return r, nil
}

// FileURI is the resource of a file of sandbox; its path's characters
// that a URI reserves are escaped, its slashes kept.
func FileURI(sandbox, p string) string {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		parts[i] = url.PathEscape(part)
	}
	return scheme + url.PathEscape(sandbox) + "/files/" + strings.Join(parts, "/")
}

// DiffURI is the resource of sandbox's diff.
func DiffURI(sandbox string) string { return scheme + url.PathEscape(sandbox) + "/diff" }

// sandbox finds the sandbox a resource names; an unknown one is the
// protocol's "resource not found".
func (s *server) sandbox(ctx context.Context, uri, want string) (*client.Sandbox, URI, error) {
	r, err := Parse(uri)
	if err != nil {
		return nil, r, err
	}
	if r.Kind != want {
		return nil, r, mcp.ResourceNotFoundError(uri)
	}
	sb, err := s.find(ctx, r.Sandbox)
	if errors.Is(err, client.ErrNoSuchSandbox) {
		return nil, r, mcp.ResourceNotFoundError(uri)
	}
	return sb, r, err
}

func (s *server) readFile(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.sandbox(ctx, uri, "files")
	if err != nil {
		return nil, err
	}
	if r.Rest == "" {
		return nil, fmt.Errorf("resource %s names no file: give sandbox://SANDBOX/files/PATH", uri)
	}
	data, err := sb.ReadFile(ctx, r.Rest, client.ReadOptions{Limit: int64(s.max)})
	switch {
	case errors.Is(err, client.ErrNoSuchFile):
		return nil, mcp.ResourceNotFoundError(uri)
	case errors.Is(err, client.ErrTooLarge):
		return nil, fmt.Errorf("reading resource %s: the file is over the %d bytes a resource read gives: read it in parts with the file_read tool (offset, max_bytes): %w",
			uri, s.max, err)
	case err != nil:
		return nil, fmt.Errorf("reading resource %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{Contents(uri, r.Rest, data)}}, nil
}

// Contents is a file's bytes as a resource: text when it is UTF-8 with
// no NUL, a blob otherwise; its MIME type by its name, else by its
// bytes.
func Contents(uri, name string, data []byte) *mcp.ResourceContents {
	mt := mime.TypeByExtension(path.Ext(name))
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 { // an ELF's bytes may be valid UTF-8
		if mt == "" || !strings.HasPrefix(mt, "text/") && !strings.Contains(mt, "json") && !strings.Contains(mt, "xml") && !strings.Contains(mt, "javascript") {
			mt = "text/plain; charset=utf-8"
		}
		return &mcp.ResourceContents{URI: uri, MIMEType: mt, Text: string(data)}
	}
	if mt == "" || strings.HasPrefix(mt, "text/") {
		mt = http.DetectContentType(data)
	}
	return &mcp.ResourceContents{URI: uri, MIMEType: mt, Blob: data}
}

func (s *server) readDiff(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.sandbox(ctx, uri, "diff")
	if err != nil {
		return nil, err
	}
	if r.Rest != "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	text, err := sb.UnifiedDiff(ctx, client.UnifiedDiffOptions{MaxBytes: uint64(s.max)})
	if err != nil {
		return nil, fmt.Errorf("reading resource %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/x-diff", Text: strings.ToValidUTF8(text, "\uFFFD")}}}, nil
}

func (s *server) readLog(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.sandbox(ctx, uri, "logs")
	if err != nil {
		return nil, err
	}
	if r.Rest == "" || strings.Contains(r.Rest, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var out []byte
	var next uint64
	for len(out) < s.max {
		data, n, ended, err := sb.ReadLog(ctx, r.Rest, next, uint32(min(client.MaxLogChunk, s.max-len(out))))
		if errors.Is(err, client.ErrNoSuchCommand) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, fmt.Errorf("reading resource %s: %w", uri, err)
		}
		out, next = append(out, data...), n
		if ended || len(data) == 0 {
			break
		}
	}
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	if len(out) >= s.max {
		text += fmt.Sprintf("\n[... the log goes on past %d bytes: the logs tool reads it on from offset %d]\n", len(out), next)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain; charset=utf-8", Text: text}}}, nil
}
