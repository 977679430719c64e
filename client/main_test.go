package client_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The tests and examples run against the real sandboxd, installed in a
// testbed as a sysadmin would (as tests/integration does), with two
// projects: "web" (index.html) and "site" (index.html), which the
// promotion example changes.

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	repo := filepath.Dir(wd) // client -> repository
	// A name of its own: other packages' tests rebuild theirs, and must
	// not swap the binary under this package's daemon.
	bin := filepath.Join(repo, "bin", "test", "sandboxd-client")
	if !testbed.Inside() {
		build := exec.Command("go", "build", "-o", bin, "./cmd/sandboxd")
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building sandboxd: %v\n%s", err, out)
			os.Exit(2)
		}
	} else {
		// Before m.Run: the examples, which have no *testing.T, need
		// the daemon too.
		install(setupTB{}, repo, bin)
	}
	testbed.Main(m)
}

// install writes the projects' files and the configuration and starts
// the daemon.
func install(t testing.TB, repo, bin string) {
	tb := testbed.Require(t)
	site := filepath.Join(tb.Btrfs.Mount, "site")
	testbed.MustRun(t, "btrfs", "subvolume", "create", site)
	for path, text := range map[string]string{
		filepath.Join(tb.Btrfs.Project, "index.html"): "<h1>web</h1>\n",
		filepath.Join(site, "index.html"):             "<h1>site</h1>\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	config := tb.SandboxdConfig(fmt.Sprintf(`[[project]]
name = "site"
path = %q
`, site))
	testbed.InstallService(t, repo, bin, config, nil)
}

// setupTB lets TestMain use the testbed's helpers, which report through
// a testing.TB, before any test runs: a failure ends the test binary.
// The helpers call only what it defines.
type setupTB struct{ testing.TB }

func (setupTB) Helper() {}

func (setupTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"installing sandboxd:"}, args...)...)
	os.Exit(2)
}

func (setupTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "installing sandboxd: "+format+"\n", args...)
	os.Exit(2)
}
