package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/mcpclients"
)

// `sandboxctl mcp` driven by MCP clients nobody on the project wrote, on
// Node 22 (tests/install-deps.sh installs them): the MCP inspector's CLI,
// in both protocol eras, each tool called with `--tool-arg k=v` as a
// person types it and as a generic client fills a tool's schema; and the
// TypeScript SDK's client, which reads the progress of a long call (the
// inspector's CLI cannot: it makes its client with progress off, and
// prints nothing of the notifications a server sends).

// mcpNode finds the clients' install; without it the test fails, naming
// tests/install-deps.sh (never a silent skip).
func mcpNode(t *testing.T) *mcpclients.Install {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := mcpclients.Find(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// inspector is the inspector CLI of era against `sandboxctl mcp`, run as
// root.
func inspector(t *testing.T, era string) *mcpclients.Inspector {
	return &mcpclients.Inspector{Install: mcpNode(t), Era: era, Server: []string{ctlBin(), "mcp"}, Home: t.TempDir()}
}

// inspect calls a tool with the inspector; it must not be a tool error or
// a protocol error. Its structured content is decoded into out (a zero
// value first).
func inspect(t *testing.T, in *mcpclients.Inspector, out any, tool string, args ...string) *mcpclients.ToolResult {
	t.Helper()
	res, run := inspectCall(t, in, tool, args...)
	if res.IsError {
		t.Fatalf("%s: a tool error: %s\n%s", tool, res.Text(), run)
	}
	if out != nil {
		if err := res.Decode(out); err != nil {
			t.Fatalf("%s: its structured content %s: %v\n%s", tool, res.StructuredContent, err, run)
		}
	}
	return res
}

// inspectCall calls a tool with the inspector; a protocol error fails
// the test.
func inspectCall(t *testing.T, in *mcpclients.Inspector, tool string, args ...string) (*mcpclients.ToolResult, *mcpclients.Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, run, err := in.Call(ctx, tool, args...)
	if err != nil {
		t.Fatalf("inspector (%s era) calling %s: %v", in.Era, tool, err)
	}
	return res, run
}

// typeLists lists the input parameters (at any depth) whose schema type
// is a list, as "tool.param": the inspector makes a --tool-arg value JSON
// only for a parameter typed exactly "array" or "object".
func typeLists(tools []mcpclients.Tool) []string {
	var found []string
	var walk func(where string, s *mcpclients.Schema)
	walk = func(where string, s *mcpclients.Schema) {
		if s == nil {
			return
		}
		if _, ok := s.Type.(string); !ok && s.Type != nil {
			found = append(found, where)
		}
		for name, p := range s.Properties {
			walk(where+"."+name, p)
		}
		walk(where+"[]", s.Items)
	}
	for _, tool := range tools {
		for name, p := range tool.InputSchema.Properties {
			walk(tool.Name+"."+name, p)
		}
	}
	slices.Sort(found)
	return found
}

// idArg is key=id as --tool-arg is given an id: quoted, a JSON string.
// The inspector JSON-parses each value before it looks at the tool's
// schema, so that an id of digits alone, or of digits, an e and digits
// (12e834567890), would go as a number or be refused as infinite.
func idArg(key, id string) string { return key + `="` + id + `"` }

// ranHi says whether an exec result is "hi" printed and a 0 exit: its
// stdout in the structured content or, were it only there, its text.
func ranHi(t *testing.T, in *mcpclients.Inspector, what string, args ...string) {
	t.Helper()
	res, r := inspectCall(t, in, "exec", args...)
	var run mcpExec
	if err := res.Decode(&run); res.IsError || err != nil {
		t.Errorf("exec with %s (%s era): a tool error: %s (%v)\n%s", what, in.Era, res.Text(), err, r)
		return
	}
	if run.ExitCode != 0 || run.How != "exited" || !(run.Stdout == "hi\n" || run.Stdout == "" && strings.Contains(res.Text(), "hi\n")) {
		t.Errorf("exec with %s (%s era): %+v, text %q; want hi and exit 0", what, in.Era, run, res.Text())
	}
}

// TestMCPInspectorWalk: with the inspector's CLI in each protocol era, an
// agent's whole walk: the tools listed with plain JSON Schema types (a
// generic client can fill them), a sandbox made, a command run given as
// an array and as a shell line, a file read, two fixes tried side by
// side, the winner promoted (the project on the host has the fix).
func TestMCPInspectorWalk(t *testing.T) {
	for _, era := range []string{"modern", "legacy"} {
		t.Run(era, func(t *testing.T) { inspectorWalk(t, era) })
	}
}

func inspectorWalk(t *testing.T, era string) {
	project := "insp-" + era
	path := addProject(t, project, map[string]string{
		"calc.sh": "add() { echo $(($1 - $2)); }\n",
		"test.sh": ". ./calc.sh\n[ \"$(add 2 3)\" = 5 ] || { echo \"add 2 3 gave $(add 2 3), want 5\" >&2; exit 1; }\n",
	})
	in := inspector(t, era)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	tools, run, err := in.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mcpclients.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"sandbox_create", "sandbox_list", "sandbox_destroy", "exec", "spawn", "file_read", "try", "promote", "promotion_status"} {
		if _, ok := byName[name]; !ok {
			t.Fatalf("tools/list (%s era) has no %s\n%s", era, name, run)
		}
	}
	// Needs mcpcalls' plain types: an array typed "array", not
	// ["null","array"], and exec's shell line.
	execIn := byName["exec"].InputSchema.Properties
	if c := execIn["command"]; c == nil || c.Type != "array" || c.Items == nil || c.Items.Type != "string" {
		t.Errorf("exec's command (%s era): %+v; want typed \"array\" of \"string\"", era, c)
	}
	if s := execIn["shell"]; s == nil || s.Type != "string" {
		t.Errorf("exec has no shell parameter typed \"string\" (%s era): %+v", era, s)
	}
	if v := byName["try"].InputSchema.Properties["variants"]; v == nil || v.Type != "array" {
		t.Errorf("try's variants (%s era): %+v; want typed \"array\"", era, v)
	}
	if lists := typeLists(tools); len(lists) > 0 {
		t.Errorf("parameters typed as a list of types, which the inspector sends as strings (%s era): %v", era, lists)
	}
	// The inspector's own check of what a generic client can map: no
	// error, and nothing to say of any tool's input.
	strict, err := in.Run(ctx, "--method", "tools/list", "--strict")
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	tool := ""
	for _, line := range strings.Split(strict.Stderr, "\n") {
		if w, ok := strings.CutPrefix(line, "Warning: tool "); ok {
			tool = w
		}
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "Path: inputSchema."); ok {
			inputs = append(inputs, tool+" "+p)
		}
	}
	if strict.Exit != 0 || len(inputs) > 0 {
		t.Errorf("tools/list --strict (%s era): exit %d; the inspector finds input schemas not portable: %v", era, strict.Exit, inputs)
	}

	var sb struct{ ID, Name, State, Project string }
	created := inspect(t, in, &sb, "sandbox_create", "project="+project, "name="+project+"-1", "ttl_minutes=30")
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	if len(sb.ID) != 12 || sb.Name != project+"-1" || sb.State != "ready" || sb.Project != project {
		t.Fatalf("sandbox_create (%s era): %+v", era, sb)
	}
	// 2026-07-28 has no initialize: a result names its server (the
	// inspector pins that revision for the modern era, or fails).
	var who struct{ Name string }
	_ = json.Unmarshal(created.Meta["io.modelcontextprotocol/serverInfo"], &who)
	if (era == "modern") != (who.Name == "sandboxd") {
		t.Errorf("sandbox_create's result in the %s era names its server as %q in _meta", era, who.Name)
	}
	// Typed as a person types them: the array as JSON, the number bare
	// (the id quoted: idArg).
	ranHi(t, in, "an array", idArg("sandbox", sb.ID), `command=["sh","-c","echo hi"]`, "timeout_seconds=60")
	ranHi(t, in, "a shell line", "sandbox="+sb.Name, "shell=echo hi")
	var failed mcpExec
	res := inspect(t, in, &failed, "exec", idArg("sandbox", sb.ID), `command=["sh","test.sh"]`)
	if failed.ExitCode != 1 || !strings.Contains(failed.Stderr+res.Text(), "add 2 3 gave -1, want 5") {
		t.Errorf("the project's failing test, run with exec (%s era): %+v, text %q", era, failed, res.Text())
	}

	// The content once, in the text under its heading.
	var read struct{ Encoding string }
	res = inspect(t, in, &read, "file_read", idArg("sandbox", sb.ID), "path=calc.sh")
	if content := textSection(res.Text(), "content"); content != "add() { echo $(($1 - $2)); }\n" || read.Encoding != "utf-8" {
		t.Errorf("file_read calc.sh (%s era): %+v, content %q", era, read, content)
	}

	// Two fixes, a wrong one first: the right one wins and is kept.
	var report struct {
		Winner  int
		Results []struct {
			ID           string
			Passed, Kept bool
			Result       string
			Winner       bool
			FailedIn     string `json:"failed_in"`
		}
	}
	inspect(t, in, &report, "try", "project="+project, `variants=["sed -i 's/-/*/' calc.sh","sed -i 's/-/+/' calc.sh"]`, "check=sh test.sh", "timeout_seconds=50")
	if len(report.Results) != 2 || report.Winner != 1 || report.Results[0].Passed || report.Results[0].FailedIn != "check" ||
		!report.Results[1].Passed || !report.Results[1].Kept || report.Results[0].Kept {
		t.Fatalf("try (%s era): %+v; want the second fix to pass and be kept, the first to fail its check", era, report)
	}
	winner := report.Results[1].ID

	// Under the inspector's request timeout (60 s): past it, the
	// promotion goes on and promotion_status follows it.
	var p struct {
		Promotion, State, Message string
		Changes                   int
	}
	inspect(t, in, &p, "promote", idArg("sandbox", winner), "wait_seconds=45")
	if p.State == "running" {
		waitFor(t, "the promotion to end", func() bool {
			inspect(t, in, &p, "promotion_status", idArg("promotion", p.Promotion))
			return p.State != "running"
		})
	}
	if p.State != "done" || p.Changes != 1 {
		t.Fatalf("promote the winner (%s era): %+v", era, p)
	}
	if b, err := os.ReadFile(filepath.Join(path, "calc.sh")); err != nil || string(b) != "add() { echo $(($1 + $2)); }\n" {
		t.Fatalf("the project's calc.sh after the promotion (%s era): %q, %v", era, b, err)
	}

	var gone struct{ Destroyed string }
	inspect(t, in, &gone, "sandbox_destroy", idArg("sandbox", sb.ID))
	if gone.Destroyed != sb.ID {
		t.Errorf("sandbox_destroy (%s era): %+v", era, gone)
	}
	// A tool error is a result the inspector shows, with what to do.
	res, run = inspectCall(t, in, "sandbox_status", idArg("sandbox", sb.ID))
	if !res.IsError || run.Error == nil || run.Error.Code != "tool_is_error" ||
		!regexp.MustCompile(`no sandbox is called or starts with`).MatchString(res.Text()) {
		t.Errorf("sandbox_status of the destroyed sandbox (%s era): %+v\n%s", era, res, run)
	}
}

// TestMCPTypeScriptSDKClient: a client on the MCP TypeScript SDK lists the
// tools, makes a sandbox, runs a command in it, reads the progress of a
// 3 s one (its output told while it runs), and destroys it; the SDK
// checks each structured result against its tool's output schema.
func TestMCPTypeScriptSDKClient(t *testing.T) {
	addProject(t, "ts-sdk", map[string]string{"README": "ts\n"})
	node := mcpNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	report, stderr, err := node.TSClient(ctx, t.TempDir(), "ts-sdk", ctlBin(), "mcp")
	if err != nil {
		t.Fatal(err)
	}
	// 2025-11-25 is the newest revision SDK 1.x speaks.
	if report.ProtocolVersion != "2025-11-25" || report.Server.Name != "sandboxd" {
		t.Errorf("the TypeScript SDK agreed on %q with %+v; want 2025-11-25 with sandboxd", report.ProtocolVersion, report.Server)
	}
	for _, name := range []string{"sandbox_create", "exec", "sandbox_destroy", "try", "promote"} {
		if !slices.Contains(report.Tools, name) {
			t.Errorf("the TypeScript SDK lists no %s: %v", name, report.Tools)
		}
	}
	if report.Created == nil || report.Exec == nil || report.Destroyed == nil {
		t.Fatalf("the TypeScript client made %+v; want create, exec and destroy\n%s", report, stderr)
	}
	var sb struct{ ID, State string }
	if err := json.Unmarshal(report.Created.Structured, &sb); err != nil || report.Created.IsError || len(sb.ID) != 12 || sb.State != "ready" {
		t.Fatalf("sandbox_create from the TypeScript SDK: %+v (%v)", report.Created, err)
	}
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	var run mcpExec
	if err := json.Unmarshal(report.Exec.Structured, &run); err != nil || report.Exec.IsError || run.ExitCode != 0 ||
		!(run.Stdout == "hi from the TypeScript SDK\n" || run.Stdout == "" && strings.Contains(report.Exec.Text, "hi from the TypeScript SDK\n")) {
		t.Errorf("exec from the TypeScript SDK: %+v, %+v (%v)", report.Exec, run, err)
	}
	tsProgress(t, report.Progress)
	var gone struct{ Destroyed string }
	if err := json.Unmarshal(report.Destroyed.Structured, &gone); err != nil || gone.Destroyed != sb.ID {
		t.Errorf("sandbox_destroy from the TypeScript SDK: %+v (%v)", report.Destroyed, err)
	}
	if slices.Contains(listedIDs(t), sb.ID) {
		t.Errorf("sandboxctl list still lists %s, which the TypeScript SDK destroyed", sb.ID)
	}
}

// tsProgress checks the TypeScript SDK's exec of `sleep 1; echo a; sleep
// 1; echo b; sleep 1` with onprogress: a notification came before the
// result carrying a and not yet b (sent while the command ran, a second
// before it printed b), and the result has both.
func tsProgress(t *testing.T, p *mcpclients.TSProgress) {
	t.Helper()
	if p == nil || p.Result == nil {
		t.Fatalf("the TypeScript client did not run the 3 s exec with onprogress: %+v", p)
	}
	if stdout, _ := execSections(p.Result.Text); p.Result.IsError || stdout != "a\nb\n" {
		t.Errorf("the 3 s exec from the TypeScript SDK: %+v; want a and b", p.Result)
	}
	var told []string
	streamed := false
	for _, n := range p.Notes[:min(p.BeforeResult, len(p.Notes))] {
		told = append(told, n.Message)
		if strings.Contains(n.Message, "stdout: a\n") && !strings.Contains(n.Message, "b\n") {
			streamed = true
		}
	}
	if !streamed {
		t.Errorf("the 3 s exec's progress before its result: %q (%d in all); want one telling a before b was printed", told, len(p.Notes))
	}
}

// TestMCPInspectorResourcesAndAFigure: with the inspector's CLI in each
// protocol era, the server's resource templates listed, a sandbox's file
// read as a resource (the sandbox's version of it), and a python3
// session's matplotlib figure returned as a PNG.
func TestMCPInspectorResourcesAndAFigure(t *testing.T) {
	for _, era := range []string{"modern", "legacy"} {
		t.Run(era, func(t *testing.T) { inspectorResourcesAndAFigure(t, era) })
	}
}

func inspectorResourcesAndAFigure(t *testing.T, era string) {
	project := "insp-res-" + era
	addProject(t, project, map[string]string{"notes.txt": "the project's notes\n"})
	in := inspector(t, era)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	templates, run, err := in.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(templates)
	if want := []string{"sandbox://{sandbox}/diff", "sandbox://{sandbox}/files/{+path}", "sandbox://{sandbox}/logs/{process}"}; !slices.Equal(templates, want) {
		t.Errorf("resources/templates/list (%s era): %q; want %q\n%s", era, templates, want, run)
	}

	var sb struct{ ID string }
	inspect(t, in, &sb, "sandbox_create", "project="+project, "name="+project+"-1")
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	var changed mcpExec
	inspect(t, in, &changed, "exec", idArg("sandbox", sb.ID), "shell=echo changed in the sandbox >> notes.txt")
	// The sandbox by its name, as the README's example reads it.
	uri := "sandbox://" + project + "-1/files/notes.txt"
	contents, run, err := in.ReadResource(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	if len(contents) != 1 || contents[0].URI != uri || contents[0].Text != "the project's notes\nchanged in the sandbox\n" {
		t.Errorf("resources/read %s (%s era): %+v; want the sandbox's notes.txt as text\n%s", uri, era, contents, run)
	}

	// Typed on one line, as a person types it at the inspector.
	var repl struct {
		Output string
		Status int
	}
	res := inspect(t, in, &repl, "repl", idArg("sandbox", sb.ID), "language=python3",
		"code=import matplotlib.pyplot as plt; plt.plot([1, 2, 3], [1, 4, 9]); plt.title('squares'); plt.show()")
	var images []mcpclients.Content
	for _, c := range res.Content {
		if c.Type == "image" {
			images = append(images, c)
		}
	}
	if repl.Status != 0 || len(images) != 1 {
		t.Fatalf("repl python3 drawing a figure (%s era): status %d, %d images; want one: %s", era, repl.Status, len(images), res.Text())
	}
	data, err := base64.StdEncoding.DecodeString(images[0].Data)
	if err != nil || images[0].MimeType != "image/png" {
		t.Fatalf("the figure (%s era): type %s, %v; want image/png in base64", era, images[0].MimeType, err)
	}
	if img, err := png.Decode(bytes.NewReader(data)); err != nil || img.Bounds().Dx() < 100 || img.Bounds().Dy() < 100 {
		t.Errorf("the figure (%s era), %d bytes: does not decode as a PNG of a figure (%v)", era, len(data), err)
	}
}

// TestMCPInspectorGoSession: the inspector's CLI is a client a run, and
// a stdio server ends with its client, and its sessions with it; so the
// CLI reaches `sandboxctl mcp --http`, a server that outlives each run,
// and there, in each protocol era, a go session keeps the func one call
// declared (with a package of the project's module) for the next call.
func TestMCPInspectorGoSession(t *testing.T) {
	addProject(t, "insp-go", map[string]string{
		"go.mod":       "module example.com/shapes\n\ngo 1.22\n",
		"area/area.go": "package area\n\n// Square is the area of a square of side s.\nfunc Square(s int) int { return s * s }\n",
	})
	token := "insp-" + suffix()
	_, url, _ := startHTTPMCP(t, "127.0.0.1:0", "SANDBOXD_MCP_TOKEN="+token)
	for _, era := range []string{"modern", "legacy"} {
		in := inspector(t, era)
		in.URL, in.Token = url, token

		var sb struct{ ID string }
		inspect(t, in, &sb, "sandbox_create", "project=insp-go")
		t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
		var repl struct {
			Output string
			Status int
		}
		inspect(t, in, &repl, "repl", idArg("sandbox", sb.ID), "language=go",
			"code=import (\n\t\"fmt\"\n\t\"example.com/shapes/area\"\n)\n\nfunc cube(n int) int { return n * area.Square(n) }\nfmt.Println(\"declared\")\n")
		if repl.Output != "declared\n" || repl.Status != 0 {
			t.Errorf("repl go declaring cube (%s era): %+v", era, repl)
		}
		inspect(t, in, &repl, "repl", idArg("sandbox", sb.ID), "language=go", "code=fmt.Println(cube(3))")
		if repl.Output != "27\n" || repl.Status != 0 {
			t.Errorf("repl go calling cube, declared in the call before (%s era): %+v; want 27", era, repl)
		}
	}
}

// TestMCPInspectorSQLSession: with the inspector's CLI in each protocol
// era, a sql input on the booted PostgreSQL of an adopted cluster gives
// its rows as a table.
func TestMCPInspectorSQLSession(t *testing.T) {
	install(t)
	id := bootedCluster(t, "insp-pgsql")
	for _, era := range []string{"modern", "legacy"} {
		var repl struct {
			Status int
			Tables []struct {
				Columns []string
				Rows    [][]*string
			}
		}
		in := inspector(t, era)
		res := inspect(t, in, &repl, "repl", idArg("sandbox", id), "language=sql", "code=select n, n * n as square from generate_series(1, 3) as n")
		var rows []string
		for _, tb := range repl.Tables {
			for _, r := range tb.Rows {
				cells := []string{}
				for _, c := range r {
					if c == nil {
						cells = append(cells, "null")
					} else {
						cells = append(cells, *c)
					}
				}
				rows = append(rows, strings.Join(cells, " "))
			}
		}
		if repl.Status != 0 || len(repl.Tables) != 1 || strings.Join(repl.Tables[0].Columns, ",") != "n,square" ||
			strings.Join(rows, ",") != "1 1,2 4,3 9" {
			t.Errorf("repl sql (%s era): status %d, tables %+v, rows %q; want n, square: 1 1, 2 4, 3 9\n%s", era, repl.Status, repl.Tables, rows, res.Text())
		}
	}
}
