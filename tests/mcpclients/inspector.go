package mcpclients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Inspector runs the MCP inspector's CLI (`inspector --cli --format
// json`) against a stdio server, or one served over HTTP, one run a
// call, as a person or a script would type it.
type Inspector struct {
	Install *Install
	// Era is the protocol era it negotiates: "modern" (MCP 2026-07-28:
	// stateless, no initialize, the revision in each request's _meta) or
	// "legacy" (the initialize handshake of 2025-11-25 and before).
	Era string
	// Server is the stdio server's command line: sandboxctl mcp.
	Server []string
	// URL, when set, is where a server serves the streamable HTTP
	// transport (sandboxctl mcp --http), in place of Server: a server
	// that outlives each run, so that what one call opens (a repl
	// session) is there for the next. Token is its bearer token.
	URL, Token string
	// Home is the inspector's HOME: it may keep a catalog and a client
	// configuration under ~/.mcp-inspector.
	Home string
}

// Run is one run of the inspector: its command line, what it printed and
// how it exited, with its JSON output parsed.
type Run struct {
	Args           []string
	Exit           int
	Stdout, Stderr string
	// Result is the "result" of its JSON output (a tool error has one
	// too); nil without one.
	Result json.RawMessage
	// Error is the error envelope it prints on stderr when the call
	// failed (a tool error's code is "tool_is_error"); nil without one.
	Error *RunError
}

// RunError is the inspector's error envelope.
type RunError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// String says what was run and what came of it, for a test's failure.
func (r *Run) String() string {
	return fmt.Sprintf("inspector %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Exit, r.Stdout, r.Stderr)
}

// Run runs the inspector's CLI with args (its options: --method and what
// goes with it) against the server. The error is only for a run that
// could not be made or whose output is not the inspector's JSON; a call
// that failed is a Run with an Error.
func (i *Inspector) Run(ctx context.Context, args ...string) (*Run, error) {
	argv := []string{"--cli", "--format", "json", "--protocol-era", i.Era}
	if i.URL != "" {
		argv = append(argv, "--transport", "http", "--server-url", i.URL, "--header", "Authorization: Bearer "+i.Token)
	}
	argv = append(argv, args...)
	if i.URL == "" {
		argv = append(append(argv, "--"), i.Server...)
	}
	cmd := exec.CommandContext(ctx, i.Install.Node, append([]string{i.Install.Inspector}, argv...)...)
	cmd.Env = i.Install.env(i.Home)
	cmd.Dir = i.Home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	run := &Run{Args: argv}
	err := cmd.Run()
	run.Stdout, run.Stderr = stdout.String(), stderr.String()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.Exit = exit.ExitCode()
	case err != nil:
		return run, fmt.Errorf("running the inspector: %w\n%s", err, run)
	}
	if out := bytes.TrimSpace(stdout.Bytes()); len(out) > 0 {
		var v struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			return run, fmt.Errorf("reading the inspector's JSON output: %w\n%s", err, run)
		}
		run.Result = v.Result
	}
	// The envelope is a line of its own on stderr, among the server's
	// stderr and the inspector's notices.
	for _, line := range strings.Split(run.Stderr, "\n") {
		var v struct {
			Error *RunError `json:"error"`
		}
		if strings.HasPrefix(line, `{"error"`) && json.Unmarshal([]byte(line), &v) == nil && v.Error != nil {
			run.Error = v.Error
		}
	}
	if run.Result == nil && run.Error == nil {
		return run, fmt.Errorf("the inspector printed neither a result nor an error\n%s", run)
	}
	return run, nil
}

// Schema is the part of a JSON Schema a generic client reads to fill in
// a tool's arguments. Type is a string, or a list of them.
type Schema struct {
	Type        any                `json:"type"`
	Description string             `json:"description"`
	Properties  map[string]*Schema `json:"properties"`
	Items       *Schema            `json:"items"`
	Required    []string           `json:"required"`
}

// Tool is a tool as tools/list gives it.
type Tool struct {
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	InputSchema  Schema         `json:"inputSchema"`
	OutputSchema *Schema        `json:"outputSchema"`
	Annotations  map[string]any `json:"annotations"`
}

// Tools lists the server's tools (tools/list).
func (i *Inspector) Tools(ctx context.Context, args ...string) ([]Tool, *Run, error) {
	run, err := i.Run(ctx, append([]string{"--method", "tools/list"}, args...)...)
	if err != nil {
		return nil, run, err
	}
	if run.Error != nil {
		return nil, run, fmt.Errorf("tools/list failed: %s: %s\n%s", run.Error.Code, run.Error.Message, run)
	}
	var v struct {
		Tools []Tool `json:"tools"`
	}
	if err := json.Unmarshal(run.Result, &v); err != nil {
		return nil, run, fmt.Errorf("reading tools/list's result: %w\n%s", err, run)
	}
	return v.Tools, run, nil
}

// Templates lists the server's resource templates' URI templates
// (resources/templates/list).
func (i *Inspector) Templates(ctx context.Context) ([]string, *Run, error) {
	run, err := i.Run(ctx, "--method", "resources/templates/list")
	if err != nil {
		return nil, run, err
	}
	if run.Error != nil {
		return nil, run, fmt.Errorf("resources/templates/list failed: %s: %s\n%s", run.Error.Code, run.Error.Message, run)
	}
	var v struct {
		Templates []struct {
			URITemplate string `json:"uriTemplate"`
		} `json:"resourceTemplates"`
	}
	if err := json.Unmarshal(run.Result, &v); err != nil {
		return nil, run, fmt.Errorf("reading resources/templates/list's result: %w\n%s", err, run)
	}
	var uris []string
	for _, t := range v.Templates {
		uris = append(uris, t.URITemplate)
	}
	return uris, run, nil
}

// ResourceContents is one of what resources/read gave back: text, or
// a blob in base64.
type ResourceContents struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// ReadResource reads a resource (resources/read --uri uri). A resource
// the server refuses (not found) is the error.
func (i *Inspector) ReadResource(ctx context.Context, uri string) ([]ResourceContents, *Run, error) {
	run, err := i.Run(ctx, "--method", "resources/read", "--uri", uri)
	if err != nil {
		return nil, run, err
	}
	if run.Error != nil {
		return nil, run, fmt.Errorf("resources/read %s failed: %s: %s\n%s", uri, run.Error.Code, run.Error.Message, run)
	}
	var v struct {
		Contents []ResourceContents `json:"contents"`
	}
	if err := json.Unmarshal(run.Result, &v); err != nil {
		return nil, run, fmt.Errorf("reading resources/read %s's result: %w\n%s", uri, err, run)
	}
	return v.Contents, run, nil
}

// Content is one content block of a tool's result.
type Content struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Data     string `json:"data,omitempty"`
	URI      string `json:"uri,omitempty"`
}

// ToolResult is what tools/call gave back.
type ToolResult struct {
	Content           []Content       `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	// Meta is the result's _meta: in the modern era the server names
	// itself there (io.modelcontextprotocol/serverInfo), there being no
	// initialize.
	Meta map[string]json.RawMessage `json:"_meta"`
}

// Text is the result's text content, joined.
func (r *ToolResult) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Decode decodes the structured content into out.
func (r *ToolResult) Decode(out any) error {
	if len(r.StructuredContent) == 0 {
		return fmt.Errorf("the result has no structured content (text: %q)", r.Text())
	}
	return json.Unmarshal(r.StructuredContent, out)
}

// Call calls a tool (tools/call) with args as `--tool-arg` pairs, each
// "key=value" as a person types it: the inspector makes the value a
// number, a boolean, an array or an object as the tool's input schema
// says the key is. A tool error is a result (IsError); a protocol error
// is the error.
func (i *Inspector) Call(ctx context.Context, tool string, args ...string) (*ToolResult, *Run, error) {
	argv := []string{"--method", "tools/call", "--tool-name", tool}
	if len(args) > 0 {
		argv = append(append(argv, "--tool-arg"), args...)
	}
	run, err := i.Run(ctx, argv...)
	if err != nil {
		return nil, run, err
	}
	if run.Result == nil {
		return nil, run, fmt.Errorf("tools/call %s failed: %s: %s\n%s", tool, run.Error.Code, run.Error.Message, run)
	}
	var res ToolResult
	if err := json.Unmarshal(run.Result, &res); err != nil {
		return nil, run, fmt.Errorf("reading tools/call %s's result: %w\n%s", tool, err, run)
	}
	return &res, run, nil
}
