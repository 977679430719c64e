package units_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// trickyEnvFile is an environment file with the cases where readers of
// such files differ; every name starts with T_.
const trickyEnvFile = `# a comment
  ; another, indented
T_PLAIN=1
T_SPACES =   interior  kept   
T_SINGLE='x \n $y " \'
T_DOUBLE="a\"b\\c\$d\qe"
T_MULTI="one
two"
T_JOINED=one\
two
T_ESCAPED=a\\b\ 
T_QUOTED_LATER=x "y z"
T_PIECES='a'"b"c
T_OVERRIDDEN=file
T_UNSET=gone
not a valid-name=1
T_PLAIN=2
# a comment \
T_AFTER_COMMENT=shown since systemd 254, part of the comment before
T_LAST=no newline at the end`

// The environment ServiceEnvironment reads for a service is the one the
// testbed's systemd gave that service's process (its /proc/PID/environ),
// for every variable the unit's settings make: Environment=, a tricky
// EnvironmentFile=, a glob of files, a "-" file that is missing, and
// UnsetEnvironment=.
func TestServiceEnvironmentIsWhatTheServiceGets(t *testing.T) {
	m := connect(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tricky.env"), []byte(trickyEnvFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"10.env": "T_GLOB=10\nT_GLOB2=10\n", "20.env": "T_GLOB=20\n", ".dot.env": "T_GLOB=dot\n"} {
		if err := os.WriteFile(filepath.Join(dir, "d", name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const unit = "units-test-env.service"
	// Type=exec: systemd-run returns once sleep is exec'd, so that the
	// MainPID's environ below is the service's, not that of systemd's
	// child before its execve (read too early on a busy machine: empty).
	run := exec.Command("systemd-run", "--unit="+unit, "--quiet", "--property=Type=exec",
		"--property=Environment=T_ENV=1 T_OVERRIDDEN=env",
		"--property=EnvironmentFile="+filepath.Join(dir, "tricky.env"),
		"--property=EnvironmentFile=-"+filepath.Join(dir, "missing.env"),
		"--property=EnvironmentFile="+filepath.Join(dir, "d", "*.env"),
		"--property=UnsetEnvironment=T_UNSET",
		"sleep", "300")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", run, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("systemctl", "stop", unit).Run() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := m.ServiceEnvironment(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(systemctlShow(t, unit, "MainPID")["MainPID"])
	if err != nil || pid == 0 {
		t.Fatalf("MainPID of %s: %d, %v", unit, pid, err)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, kv := range bytes.Split(bytes.TrimSuffix(environ, []byte{0}), []byte{0}) {
		if bytes.HasPrefix(kv, []byte("T_")) {
			want = append(want, string(kv))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("ServiceEnvironment(%s) =\n%q\nsystemd gave the service\n%q", unit, got, want)
	}
	// The control: the file was read, its quoting applied, and systemd
	// did what the cases are about.
	for _, kv := range []string{"T_ENV=1", "T_OVERRIDDEN=file", "T_DOUBLE=a\"b\\c$d\\qe", "T_MULTI=one\ntwo", "T_PLAIN=2", "T_GLOB=20", "T_GLOB2=10"} {
		if !slices.Contains(got, kv) {
			t.Errorf("ServiceEnvironment(%s) lacks %q: %q", unit, kv, got)
		}
	}
}

func TestServiceEnvironmentOfAMissingUnitOrFile(t *testing.T) {
	m := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.ServiceEnvironment(ctx, "units-test-no-such.service"); !errors.Is(err, units.ErrNotFound) ||
		!strings.Contains(err.Error(), "units-test-no-such.service") {
		t.Errorf("ServiceEnvironment of a unit that does not exist: %v; want ErrNotFound naming it", err)
	}
	if _, err := m.ServiceEnvironment(ctx, "units-test.scope"); !errors.Is(err, units.ErrInvalidName) {
		t.Errorf("ServiceEnvironment of a scope: %v; want ErrInvalidName", err)
	}

	// A file systemd would not start the service without: the service
	// exists (it failed to start), and reading its environment fails,
	// naming the unit and the file.
	const unit = "units-test-env-missing.service"
	missing := filepath.Join(t.TempDir(), "missing.env")
	_ = exec.Command("systemd-run", "--unit="+unit, "--quiet", "--property=EnvironmentFile="+missing, "true").Run()
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", unit).Run()
		_ = exec.Command("systemctl", "reset-failed", unit).Run()
	})
	_, err := m.ServiceEnvironment(ctx, unit)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), unit) || !strings.Contains(err.Error(), missing) {
		t.Errorf("ServiceEnvironment of a unit whose EnvironmentFile is missing: %v; want an error naming %s and %s", err, unit, missing)
	}
}
