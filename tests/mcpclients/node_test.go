package mcpclients

import (
	"context"
	"strings"
	"testing"
)

// Without the install, Find fails saying where it looked and which script
// installs it: a test that needs Node 22 never skips silently.
func TestFindSaysToRunInstallDeps(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SANDBOXD_TEST_NODE_DIR", dir)
	in, err := Find(context.Background())
	if err == nil {
		t.Fatalf("Find in an empty directory found %+v", in)
	}
	if msg := err.Error(); !strings.Contains(msg, "tests/install-deps.sh") || !strings.Contains(msg, dir) {
		t.Errorf("Find in an empty directory: %q; want it to name %s and tests/install-deps.sh", msg, dir)
	}
}
