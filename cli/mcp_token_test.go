package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cli/verb"
)

// --token-file is refused, as ssh refuses a key, when others than the
// caller may read or change it or it is not the caller's: whoever reads
// the token may use the caller's sandboxes through the server. A private
// file of the caller's passes the check (and the run then stops at the
// socket's directory, which does not exist: nothing is served).
func TestMCPTokenFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "missing", "mcp.sock")
	token := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("s3cret-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
	}{{"world-readable", 0o644}, {"group-readable", 0o640}, {"group-writable", 0o620}, {"others-writable", 0o602}} {
		p := token(c.name, c.mode)
		_, errOut, code := run("mcp", "--http", sock, "--token-file", p)
		if code != verb.ExitDenied || !strings.Contains(errOut, "chmod 600 "+p) {
			t.Errorf("a token file of mode %04o: exit %d, %q; want exit %d saying chmod 600 %s", c.mode, code, errOut, verb.ExitDenied, p)
		}
	}
	if os.Getuid() == 0 {
		p := token("others", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := run("mcp", "--http", sock, "--token-file", p)
		if code != verb.ExitDenied || !strings.Contains(errOut, "owned by uid 65534, not by you") {
			t.Errorf("a token file of another user's: exit %d, %q; want it refused", code, errOut)
		}
	}
	p := token("private", 0o600)
	_, errOut, _ := run("mcp", "--http", sock, "--token-file", p)
	if strings.Contains(errOut, "token") {
		t.Errorf("a private token file of the caller's: %q; want it read", errOut)
	}
}
