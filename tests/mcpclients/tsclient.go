package mcpclients

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed tsclient.mjs
var tsClientScript []byte

// TSCall is what one call of the TypeScript SDK's client gave back.
type TSCall struct {
	IsError    bool            `json:"is_error"`
	Structured json.RawMessage `json:"structured"`
	Text       string          `json:"text"`
}

// TSProgress is an exec whose progress the TypeScript SDK's client read:
// the notifications in the order they came, how many came before the
// result, and the result.
type TSProgress struct {
	BeforeResult int `json:"before_result"`
	Notes        []struct {
		Progress float64  `json:"progress"`
		Total    *float64 `json:"total"`
		Message  string   `json:"message"`
	} `json:"notes"`
	Result *TSCall `json:"result"`
}

// TSReport is what tsclient.mjs printed: the revision the SDK and the
// server agreed on, the server's name, its tools, the type of exec's
// command parameter, and its calls (sandbox_create, exec, exec of a 3 s
// shell line with its progress, sandbox_destroy).
type TSReport struct {
	ProtocolVersion string `json:"protocol_version"`
	Server          struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"server"`
	Tools           []string    `json:"tools"`
	ExecCommandType any         `json:"exec_command_type"`
	Created         *TSCall     `json:"created"`
	Exec            *TSCall     `json:"exec"`
	Progress        *TSProgress `json:"progress"`
	Destroyed       *TSCall     `json:"destroyed"`
	Error           string      `json:"error"`
}

// TSClient runs tsclient.mjs (a copy in home, which is also its HOME)
// with Node 22 against the stdio server: it makes a sandbox of project,
// runs a command in it, runs a 3 s one reading its progress, and
// destroys it. The error is for a run that
// failed or printed no report; stderr (the server's too) is in it.
func (in *Install) TSClient(ctx context.Context, home, project string, server ...string) (*TSReport, string, error) {
	script := filepath.Join(home, "tsclient.mjs")
	if err := os.WriteFile(script, tsClientScript, 0o644); err != nil {
		return nil, "", fmt.Errorf("writing the TypeScript client: %w", err)
	}
	cmd := exec.CommandContext(ctx, in.Node, append([]string{script, in.Dir, project, "--"}, server...)...)
	cmd.Env = in.env(home)
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var report TSReport
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &report); err != nil {
		return nil, stderr.String(), fmt.Errorf("the TypeScript client (%v) printed no report: %w\nstdout: %s\nstderr: %s", runErr, err, stdout.String(), stderr.String())
	}
	if runErr != nil {
		return &report, stderr.String(), fmt.Errorf("the TypeScript client failed: %v: %s\nstderr: %s", runErr, report.Error, stderr.String())
	}
	return &report, stderr.String(), nil
}
