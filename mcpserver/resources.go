package mcpserver

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/resources"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
)

// Resources (package resources): a sandbox's files, its diff and a
// background process's log, read with resources/read. A tool whose
// output is larger than what it returns links to the resource that
// holds the whole (a resource_link content), here.

func (s *server) addResources(m *mcp.Server) { resources.Add(m, s.sandbox, s.opts.MaxFileBytes) }

// linkFilePart links a file_read that returned a part of a file to the
// file's resource, when the resource can give it whole.
func (s *server) linkFilePart(ctx context.Context, sb *client.Sandbox, p string) {
	entries, err := sb.ListFiles(ctx, p, client.ListOptions{MaxEntries: 1})
	if err != nil || len(entries) != 1 || entries[0].Kind != "file" || entries[0].Size > uint64(s.opts.MaxFileBytes) {
		return
	}
	size := int64(entries[0].Size)
	toolcall.Attach(ctx, &mcp.ResourceLink{URI: resources.FileURI(sb.ID(), p), Name: path.Base(p), Size: &size,
		Description: "the whole file, with resources/read"})
}

// linkDiff links a diff whose text was cut at the tool's cap to the
// diff's resource, which holds more.
func linkDiff(ctx context.Context, sb *client.Sandbox, text string) {
	if !strings.Contains(text, "... the diff is cut here") {
		return
	}
	toolcall.Attach(ctx, &mcp.ResourceLink{URI: resources.DiffURI(sb.ID()), Name: "diff", MIMEType: "text/x-diff",
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
	name := fmt.Sprintf("/tmp/sandboxd-mcp-exec-%s.%s", strings.ToLower(randomMark()[:8]), stream)
	if err := sb.WriteFile(ctx, name, data, client.WriteOptions{Mode: 0o600}); err != nil {
		return ""
	}
	size := int64(len(data))
	toolcall.Attach(ctx, &mcp.ResourceLink{URI: resources.FileURI(sb.ID(), name), Name: path.Base(name), MIMEType: "text/plain", Size: &size,
		Description: "the command's whole " + stream + ", kept in the sandbox"})
	return name
}

// execStreams tees an exec's writers into spools (the whole output,
// kept for a link when the captures cut it) and into progress
// notifications; stop ends the notifications.
func (s *server) execStreams(ctx context.Context, opts *client.ExecOptions) ([2]*spool, func()) {
	sp := [2]*spool{{max: s.opts.MaxFileBytes}, {max: s.opts.MaxFileBytes}}
	var stop func()
	opts.Stdout, opts.Stderr, stop = toolcall.Output(ctx, io.MultiWriter(opts.Stdout, sp[0]), io.MultiWriter(opts.Stderr, sp[1]))
	return sp, stop
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
	return append(notes, toolcall.AttachImages(ctx, sb, images, root, s.opts.MaxFileBytes)...)
}

// randomMark is 26 random letters and digits, no value's by chance.
func randomMark() string { return rand.Text() }
