package integration

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Issue 33's streams over `sandboxctl mcp` against the real daemon:
// progress notifications while a command runs, resources (a file, the
// diff, an output exec cut, linked), and images (a python3 session's
// matplotlib figure, a file exec names).

// mcpProgressSession is mcpSession with a client that hands each
// progress notification to the channel it returns.
func mcpProgressSession(t *testing.T) (*mcp.ClientSession, <-chan *mcp.ProgressNotificationParams) {
	t.Helper()
	progress := make(chan *mcp.ProgressNotificationParams, 1024)
	client := mcp.NewClient(&mcp.Implementation{Name: "integration-test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params:
			default: // the test reads the first few only
			}
		}})
	cmd := exec.Command(ctlBin(), "mcp")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to sandboxctl mcp: %v\n%s", err, stderr)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, progress
}

// TestMCPProgressAndResources: an exec with a progressToken tells the
// command's output while it runs (the command goes on only once the
// test saw its first line in a notification), a file and the diff are
// read as resources, and an output exec cut is linked to a resource
// that holds it whole.
func TestMCPProgressAndResources(t *testing.T) {
	install(t)
	cs, progress := mcpProgressSession(t)
	var sb struct{ ID string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "web", "network": "none"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox": sb.ID, "command": []string{"sh", "-c",
			// It waits for the file the test makes once it saw "first" (30 s
			// at most, a safety net), then runs on for 2 s more.
			`echo first; i=0; until [ -e go ]; do sleep 0.05; i=$((i+1)); [ $i -lt 600 ] || exit 9; done; echo second; sleep 2; echo done`}}}
		params.SetProgressToken("exec-1")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, params)
		answered <- answer{res, err}
	}()
	var first *mcp.ProgressNotificationParams
	select {
	case first = <-progress:
	case a := <-answered:
		t.Fatalf("exec answered (%v, %v) before any progress notification", a.err, a.res)
	case <-time.After(time.Minute):
		t.Fatal("no progress notification within a minute of exec's start")
	}
	if first.ProgressToken != "exec-1" || !strings.Contains(first.Message, "stdout: first") {
		t.Fatalf("the first notification: %+v; want token exec-1 and stdout's first line", first)
	}
	select {
	case a := <-answered:
		t.Fatalf("exec answered (%v) before the file it waits for was made", a.err)
	default:
	}
	ok(t, "exec", sb.ID, "--", "touch", "go")
	a := <-answered
	if a.err != nil || a.res.IsError {
		t.Fatalf("exec: %v %s", a.err, toolText(a.res))
	}
	if stdout, _ := execSections(toolText(a.res)); a.res.StructuredContent.(map[string]any)["exit_code"] != 0.0 || stdout != "first\nsecond\ndone\n" {
		t.Errorf("exec's result: %s", toolText(a.res))
	}

	// A file, as text; a file of bytes, as a blob; a missing one: not
	// found.
	var wrote struct{ Bytes int }
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "notes.txt", "content": "hello resources\n"}, &wrote)
	ctx := context.Background()
	r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandbox://" + sb.ID + "/files/notes.txt"})
	if err != nil || len(r.Contents) != 1 || r.Contents[0].Text != "hello resources\n" {
		t.Fatalf("reading notes.txt as a resource: %v %+v", err, r)
	}
	// A part of it read links to the whole.
	if link := linkOf(callTool(t, cs, "file_read", map[string]any{"sandbox": sb.ID, "path": "notes.txt", "max_bytes": 5})); link == nil ||
		link.URI != "sandbox://"+sb.ID+"/files/notes.txt" || link.Size == nil || *link.Size != 16 {
		t.Errorf("file_read of 5 bytes of 16: the link %+v; want notes.txt's resource", link)
	}
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "/tmp/bytes", "content": "AAEC/w==", "encoding": "base64"}, &wrote)
	r, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandbox://" + sb.ID + "/files//tmp/bytes"})
	if err != nil || len(r.Contents) != 1 || !bytes.Equal(r.Contents[0].Blob, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("reading /tmp/bytes as a resource: %v %+v", err, r)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandbox://" + sb.ID + "/files/missing.txt"}); err == nil {
		t.Errorf("reading a missing file as a resource: no error")
	}
	r, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandbox://" + sb.ID + "/diff"})
	if err != nil || len(r.Contents) != 1 || !strings.Contains(r.Contents[0].Text, "+hello resources") {
		t.Fatalf("reading the diff as a resource: %v %+v", err, r)
	}

	// seq 1 100000 is 588,895 bytes: exec keeps 64 KiB of it, and links
	// to the whole, kept in the sandbox.
	res := callTool(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": []string{"seq", "1", "100000"}})
	link := linkOf(res)
	if res.IsError || link == nil {
		t.Fatalf("exec of a long output: no resource_link in %v", res.Content)
	}
	r, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(r.Contents) != 1 || len(r.Contents[0].Text) != 588895 || !strings.HasSuffix(r.Contents[0].Text, "\n99999\n100000\n") {
		t.Fatalf("the linked output %s: %v, %d contents", link.URI, err, len(r.Contents))
	}
}

// TestMCPPythonFigureIsAPNG: a python3 session plotting with matplotlib
// returns its figure as a PNG image; exec returns an image the command
// wrote, and names a file it refuses.
func TestMCPPythonFigureIsAPNG(t *testing.T) {
	install(t)
	cs, _ := mcpProgressSession(t)
	var sb struct{ ID string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "web", "network": "none"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })

	res := callTool(t, cs, "repl", map[string]any{"sandbox": sb.ID, "language": "python3",
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"})
	if res.IsError {
		t.Fatalf("repl: %s", toolText(res))
	}
	images := imagesOf(t, res)
	if len(images) != 1 {
		t.Fatalf("repl's result has %d images; want the figure: %s", len(images), toolText(res))
	}
	// The next input draws nothing: no image again.
	if res := callTool(t, cs, "repl", map[string]any{"sandbox": sb.ID, "language": "python3", "code": "1 + 1"}); len(imagesOf(t, res)) != 0 {
		t.Errorf("an input that drew nothing returned images")
	}

	res = callTool(t, cs, "exec", map[string]any{"sandbox": sb.ID, "images": []string{"plot.png", "index.html"}, "command": []string{"python3", "-c",
		"import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; plt.bar([1, 2], [3, 4]); plt.savefig('plot.png')"}})
	if res.IsError {
		t.Fatalf("exec: %s", toolText(res))
	}
	if n := len(imagesOf(t, res)); n != 1 {
		t.Errorf("exec's result has %d images; want plot.png", n)
	}
	if text := toolText(res); !strings.Contains(text, "index.html is not a PNG, JPEG, GIF or WebP image") {
		t.Errorf("exec's result does not name index.html as refused: %s", text)
	}
}

// linkOf is a result's resource link (nil for none).
func linkOf(res *mcp.CallToolResult) *mcp.ResourceLink {
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			return l
		}
	}
	return nil
}

// imagesOf are a result's images, each checked to be a PNG that decodes.
func imagesOf(t *testing.T, res *mcp.CallToolResult) []*mcp.ImageContent {
	t.Helper()
	var images []*mcp.ImageContent
	for _, c := range res.Content {
		img, ok := c.(*mcp.ImageContent)
		if !ok {
			continue
		}
		images = append(images, img)
		if img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("an image of type %s starting %q; want a PNG", img.MIMEType, img.Data[:min(8, len(img.Data))])
			continue
		}
		decoded, err := png.Decode(bytes.NewReader(img.Data))
		if err != nil {
			t.Errorf("the PNG does not decode: %v", err)
		} else if b := decoded.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("the PNG is %v: too small for a figure", b)
		}
	}
	return images
}

// TestMCPProgressOfTryAndPromote: try tells each variant's sandbox as it
// is made, and promote each stage's state, before they answer.
func TestMCPProgressOfTryAndPromote(t *testing.T) {
	path := addProject(t, "mcp-progress", map[string]string{"README": "progress\n"})
	cs, progress := mcpProgressSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Each variant is told as it is done, before try answers: the
	// second waits for a file written into its sandbox (from another
	// session) only once the first one's notification came.
	params := &mcp.CallToolParams{Name: "try", Arguments: map[string]any{"project": "mcp-progress", "keep": "none",
		"variants": []string{"echo a > v", "until [ -e go ]; do sleep 0.05; done; exit 3"}, "check": "test -f v"}}
	params.SetProgressToken("try-1")
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, params)
		answered <- answer{res, err}
	}()
	first := notesOf(t, progress, "try-1", 1, "(1 of 2 done)")
	name, ok := strings.CutPrefix(first[len(first)-1], "try: ")
	name, _, _ = strings.Cut(name, " ")
	if !ok || !strings.HasSuffix(name, "-1") || !strings.Contains(first[len(first)-1], " passed in ") {
		t.Fatalf("try's first notification: %q", first)
	}
	select {
	case a := <-answered:
		t.Fatalf("try answered before its second variant was let end: %+v", a)
	default:
	}
	other, _, _ := mcpSession(t)
	second := strings.TrimSuffix(name, "-1") + "-2"
	waitFor(t, "the second variant's sandbox", func() bool {
		res, err := other.CallTool(ctx, &mcp.CallToolParams{Name: "file_write",
			Arguments: map[string]any{"sandbox": second, "path": "go", "content": "go\n"}})
		return err == nil && !res.IsError
	})
	last := notesOf(t, progress, "try-1", 1, "(2 of 2 done)")
	if want := "try: " + second + " failed (command: exit 3) in "; !strings.HasPrefix(last[len(last)-1], want) {
		t.Errorf("try's second notification: %q, want it to begin %q", last, want)
	}
	if a := <-answered; a.err != nil {
		t.Fatalf("try: %v", a.err)
	} else if a.res.IsError {
		t.Fatalf("try: %s", toolText(a.res))
	}

	var sb struct{ ID string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "mcp-progress"}, &sb)
	var wrote struct{ Bytes int }
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "promoted.txt", "content": "yes\n"}, &wrote)
	params = &mcp.CallToolParams{Name: "promote", Arguments: map[string]any{"sandbox": sb.ID}}
	params.SetProgressToken("promote-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("promote: %v %s", err, toolText(res))
	}
	stages := notesOf(t, progress, "promote-1", 1, "stage project (project): passed")
	if !strings.HasPrefix(stages[len(stages)-1], "promotion ") {
		t.Errorf("promote's notifications: %q", stages)
	}
	if b, err := os.ReadFile(filepath.Join(path, "promoted.txt")); err != nil || string(b) != "yes\n" {
		t.Errorf("the project after the promotion: %q, %v", b, err)
	}
}

// notesOf reads progress notifications of token until one holds last
// n times (the client hands them over apart from the answer, which
// they preceded) and returns their messages.
func notesOf(t *testing.T, progress <-chan *mcp.ProgressNotificationParams, token string, n int, last string) []string {
	t.Helper()
	var all []string
	seen := 0
	for seen < n {
		select {
		case p := <-progress:
			if p.ProgressToken != token {
				continue
			}
			all = append(all, p.Message)
			if strings.Contains(p.Message, last) {
				seen++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("progress of %s: %q; want %d holding %q", token, all, n, last)
		}
	}
	return all
}
