package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// Resources: a sandbox's files, its diff and a background process's
// log, read with resources/read, each as the server's user through the
// client as the tools are, and bounded by MaxFileBytes. A tool whose
// output is larger than what it returns links to the resource that
// holds the whole (a resource_link content).

const (
	uriScheme = "sandbox://"
	// The templates: a path may hold slashes ({+path}); a relative path
	// starts at the project's directory, an absolute one
	// (sandbox://ID/files//etc/hosts) at the sandbox's root.
	filesTemplate = uriScheme + "{sandbox}/files/{+path}"
	diffTemplate  = uriScheme + "{sandbox}/diff"
	logsTemplate  = uriScheme + "{sandbox}/logs/{process}"
)

func (s *server) addResources(m *mcp.Server) {
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-file", Title: "A file of a sandbox", URITemplate: filesTemplate,
		Description: fmt.Sprintf("A file of a sandbox, as you see it there (at most %d KiB; file_read reads a larger one in parts). Text as text, other bytes as a blob.", s.opts.MaxFileBytes>>10)},
		s.readFileResource)
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-diff", Title: "A sandbox's changes as a unified diff", URITemplate: diffTemplate, MIMEType: "text/x-diff",
		Description: fmt.Sprintf("What a sandbox changed since it was made, as a unified diff (cut after %d KiB).", s.opts.MaxFileBytes>>10)},
		s.readDiffResource)
	m.AddResourceTemplate(&mcp.ResourceTemplate{Name: "sandbox-log", Title: "A background process's output", URITemplate: logsTemplate, MIMEType: "text/plain",
		Description: fmt.Sprintf("The output of a process spawn started, stdout and stderr together, from its start (at most %d KiB; logs reads on from an offset).", s.opts.MaxFileBytes>>10)},
		s.readLogResource)
}

// resourceURI is what a sandbox:// URI names: the sandbox, the kind
// (files, diff, logs) and the rest (a path, a process).
type resourceURI struct {
	sandbox, kind, rest string
}

func parseResourceURI(uri string) (resourceURI, error) {
	body, ok := strings.CutPrefix(uri, uriScheme)
	if !ok {
		return resourceURI{}, fmt.Errorf("resource %q is not a %s URI", uri, uriScheme)
	}
	if i := strings.IndexAny(body, "?#"); i >= 0 {
		body = body[:i]
	}
	sandbox, rest, _ := strings.Cut(body, "/")
	kind, rest, _ := strings.Cut(rest, "/")
	var err error
	r := resourceURI{kind: kind}
	if r.sandbox, err = url.PathUnescape(sandbox); err != nil || r.sandbox == "" {
		return resourceURI{}, fmt.Errorf("resource %q names no sandbox: give sandbox://SANDBOX/files/PATH, /diff or /logs/PROCESS", uri)
	}
	if r.rest, err = url.PathUnescape(rest); err != nil {
		return resourceURI{}, fmt.Errorf("resource %q: its path is not escaped right: %w", uri, err)
	}
	return r, nil
}

// fileURI is the resource of a file of sandbox; its path's characters
// that a URI reserves are escaped, its slashes kept.
func fileURI(sandbox, p string) string {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		parts[i] = url.PathEscape(part)
	}
	return uriScheme + url.PathEscape(sandbox) + "/files/" + strings.Join(parts, "/")
}

func diffURI(sandbox string) string { return uriScheme + url.PathEscape(sandbox) + "/diff" }

// resourceSandbox finds the sandbox a resource names; an unknown one is
// the protocol's "resource not found".
func (s *server) resourceSandbox(ctx context.Context, uri, want string) (*client.Sandbox, resourceURI, error) {
	r, err := parseResourceURI(uri)
	if err != nil {
		return nil, r, err
	}
	if r.kind != want {
		return nil, r, mcp.ResourceNotFoundError(uri)
	}
	sb, err := s.sandbox(ctx, r.sandbox)
	if errors.Is(err, client.ErrNoSuchSandbox) {
		return nil, r, mcp.ResourceNotFoundError(uri)
	}
	return sb, r, err
}

func (s *server) readFileResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.resourceSandbox(ctx, uri, "files")
	if err != nil {
		return nil, err
	}
	if r.rest == "" {
		return nil, fmt.Errorf("resource %s names no file: give sandbox://SANDBOX/files/PATH", uri)
	}
	data, err := sb.ReadFile(ctx, r.rest, client.ReadOptions{Limit: int64(s.opts.MaxFileBytes)})
	switch {
	case errors.Is(err, client.ErrNoSuchFile):
		return nil, mcp.ResourceNotFoundError(uri)
	case errors.Is(err, client.ErrTooLarge):
		return nil, fmt.Errorf("reading resource %s: the file is over the %d bytes a resource read gives: read it in parts with the file_read tool (offset, max_bytes): %w",
			uri, s.opts.MaxFileBytes, err)
	case err != nil:
		return nil, fmt.Errorf("reading resource %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contentsOf(uri, r.rest, data)}}, nil
}

// contentsOf is a file's bytes as a resource: text when it is UTF-8
// with no NUL, a blob otherwise; its MIME type by its name, else by its
// bytes.
func contentsOf(uri, name string, data []byte) *mcp.ResourceContents {
	mt := mime.TypeByExtension(path.Ext(name))
	if isText(data) {
		if mt == "" || !strings.HasPrefix(mt, "text/") && !strings.Contains(mt, "json") && !strings.Contains(mt, "xml") && !strings.Contains(mt, "javascript") {
			mt = "text/plain; charset=utf-8"
		}
		return &mcp.ResourceContents{URI: uri, MIMEType: mt, Text: string(data)}
	}
	if mt == "" || strings.HasPrefix(mt, "text/") {
		mt = http.DetectContentType(data)
	}
	if len(data) == 0 {
		data = []byte{}
	}
	return &mcp.ResourceContents{URI: uri, MIMEType: mt, Blob: data}
}

// isText: UTF-8 with no NUL byte (an ELF's bytes may be valid UTF-8).
func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

func (s *server) readDiffResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.resourceSandbox(ctx, uri, "diff")
	if err != nil {
		return nil, err
	}
	if r.rest != "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	text, err := sb.UnifiedDiff(ctx, client.UnifiedDiffOptions{MaxBytes: uint64(s.opts.MaxFileBytes)})
	if err != nil {
		return nil, fmt.Errorf("reading resource %s: %w", uri, err)
	}
	text, _ = utf8Text([]byte(text))
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/x-diff", Text: text}}}, nil
}

func (s *server) readLogResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	sb, r, err := s.resourceSandbox(ctx, uri, "logs")
	if err != nil {
		return nil, err
	}
	if r.rest == "" || strings.Contains(r.rest, "/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var out []byte
	var next uint64
	for len(out) < s.opts.MaxFileBytes {
		want := min(client.MaxLogChunk, s.opts.MaxFileBytes-len(out))
		data, n, ended, err := sb.ReadLog(ctx, r.rest, next, uint32(want))
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
	text, _ := utf8Text(trimPartialEnd(out))
	if len(out) >= s.opts.MaxFileBytes {
		text += fmt.Sprintf("\n[... the log goes on past %d bytes: the logs tool reads it on from offset %d]\n", len(out), next)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain; charset=utf-8", Text: text}}}, nil
}

// linkFilePart links a file_read that returned a part of a file to the
// file's resource, when the resource can give it whole.
func (s *server) linkFilePart(ctx context.Context, sb *client.Sandbox, p string) {
	entries, err := sb.ListFiles(ctx, p, client.ListOptions{MaxEntries: 1})
	if err != nil || len(entries) != 1 || entries[0].Kind != "file" || entries[0].Size > uint64(s.opts.MaxFileBytes) {
		return
	}
	size := int64(entries[0].Size)
	attach(ctx, &mcp.ResourceLink{URI: fileURI(sb.ID(), p), Name: path.Base(p), Size: &size,
		Description: "the whole file, with resources/read"})
}

// linkDiff links a diff whose text was cut at the tool's cap to the
// diff's resource, which holds more.
func linkDiff(ctx context.Context, sb *client.Sandbox, text string) {
	if !strings.Contains(text, "... the diff is cut here") {
		return
	}
	attach(ctx, &mcp.ResourceLink{URI: diffURI(sb.ID()), Name: "diff", MIMEType: "text/x-diff",
		Description: "the sandbox's whole diff (up to the server's resource cap), with resources/read"})
}

// spool keeps what a command wrote, up to max bytes, so that an output
// the exec tool cut can be kept whole in the sandbox and linked to.
type spool struct {
	mu   sync.Mutex
	max  int
	data []byte
	over bool
}

func (sp *spool) Write(p []byte) (int, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.over || len(sp.data)+len(p) > sp.max {
		sp.over, sp.data = true, nil
		return len(p), nil
	}
	sp.data = append(sp.data, p...)
	return len(p), nil
}

// keepCut writes an output that was cut (and fits a resource) to a file
// in the sandbox's /tmp and links the result to it; it returns the file
// ("" when none was written).
func (s *server) keepCut(ctx context.Context, sb *client.Sandbox, stream string, sp *spool) string {
	sp.mu.Lock()
	data, over := sp.data, sp.over
	sp.mu.Unlock()
	if over || len(data) == 0 {
		return ""
	}
	name := fmt.Sprintf("/tmp/sandboxd-mcp-exec-%s.%s", randomHex(4), stream)
	if err := sb.WriteFile(ctx, name, data, client.WriteOptions{Mode: 0o600}); err != nil {
		return ""
	}
	size := int64(len(data))
	attach(ctx, &mcp.ResourceLink{URI: fileURI(sb.ID(), name), Name: path.Base(name), MIMEType: "text/plain", Size: &size,
		Description: "the command's whole " + stream + ", kept in the sandbox"})
	return name
}

// execStreams are exec's writers: its captures, teed into spools (the
// whole output, kept for a link when the captures cut it) and into
// progress notifications; stop ends the notifications.
func (s *server) execStreams(ctx context.Context, stdout, stderr io.Writer) ([2]*spool, io.Writer, io.Writer, func()) {
	sp := [2]*spool{{max: s.opts.MaxFileBytes}, {max: s.opts.MaxFileBytes}}
	o, e, stop := streamOutput(ctx, io.MultiWriter(stdout, sp[0]), io.MultiWriter(stderr, sp[1]))
	return sp, o, e, stop
}

// execExtras adds to an exec's result, once the command ended, a link
// to each output it cut (kept whole in the sandbox) and the images it
// named; it returns the notes that tell of them.
func (s *server) execExtras(ctx context.Context, sb *client.Sandbox, images []string, root bool, stdout, stderr *capture, sp [2]*spool) []string {
	var notes []string
	for i, c := range []*capture{stdout, stderr} {
		stream := [2]string{"stdout", "stderr"}[i]
		if c.result().cut == 0 {
			continue
		}
		if name := s.keepCut(ctx, sb, stream, sp[i]); name != "" {
			notes = append(notes, fmt.Sprintf("the whole %s is kept in the sandbox at %s (the resource_link in this result; file_read or exec grep read it)", stream, name))
		}
	}
	return append(notes, s.attachImages(ctx, sb, images, root)...)
}
