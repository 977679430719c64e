package units

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestAmountOfUnsetIsUnknown(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{{uint64(math.MaxUint64), "unknown"}, {nil, "unknown"}, {"x", "unknown"}, {uint64(0), "0"}, {uint64(4096), "4096"}} {
		if got := amount(c.v).String(); got != c.want {
			t.Errorf("amount(%v) = %s; want %s", c.v, got, c.want)
		}
	}
}

func TestUnitNameUndoesBusEscaping(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/org/freedesktop/systemd1/unit/sandbox_2d1f3a_2escope", "sandbox-1f3a.scope"},
		{"/org/freedesktop/systemd1/unit/a_5fb_2eslice", "a_b.slice"},
	} {
		if got, ok := unitName(dbus.ObjectPath(c.path)); !ok || got != c.want {
			t.Errorf("unitName(%s) = %q, %v; want %q", c.path, got, ok, c.want)
		}
		if p := unitPathPrefix + sdbus.PathBusEscape(c.want); p != c.path {
			t.Errorf("go-systemd escapes %s as %s; the test expects %s", c.want, p, c.path)
		}
	}
	if _, ok := unitName("/org/freedesktop/systemd1/job/12"); ok {
		t.Error("unitName took a job's path")
	}
}

func TestWrapTurnsSystemdErrorsIntoSentinels(t *testing.T) {
	for name, want := range dbusErrors {
		for _, err := range []error{dbus.Error{Name: name, Body: []any{"it says why"}}, &dbus.Error{Name: name}} {
			got := wrap("doing", "x.scope", err)
			if !errors.Is(got, want) || !strings.HasPrefix(got.Error(), "doing x.scope: ") {
				t.Errorf("wrap(%T %s) = %v; want %v, saying what was done to which unit", err, name, got, want)
			}
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]int{`"252.38-1~deb12u1"`: 252, `"256"`: 256, `""`: 0, "x": 0} {
		if got := parseVersion(in); got != want {
			t.Errorf("parseVersion(%s) = %d; want %d", in, got, want)
		}
	}
}

// A job that systemd runs and that ends other than "done" is a *JobError
// with systemd's result: here a scope that requires a unit to be active
// before it (Requisite= and After=) that is not.
func TestStartScopeJobFailureIsJobError(t *testing.T) {
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	const name = "units-test-joberror.scope"
	defer func() {
		_ = m.Stop(ctx, name)
		_ = m.ResetFailed(ctx, name)
	}()
	err = m.startScope(ctx, Scope{Name: name, PIDs: []int{cmd.Process.Pid}},
		sdbus.PropRequisite("emergency.target"), sdbus.PropAfter("emergency.target"))
	var jerr *JobError
	if !errors.As(err, &jerr) || jerr.Result != "dependency" || jerr.Unit != name {
		t.Fatalf("starting %s with an inactive requisite: %v; want a JobError with result dependency", name, err)
	}
}
