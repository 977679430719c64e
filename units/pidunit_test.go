package units_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

// UnitOfPID is systemd's answer: a process a delegated scope's own
// cgroup below it holds, named like a service, is of the scope, which
// says Delegate=yes; a process of no unit is an error.
func TestUnitOfPIDIsSystemdsAnswerNotTheCgroupsName(t *testing.T) {
	t.Parallel()
	m := connect(t)
	p := start(t, "sleep", "300")
	const name = "units-test-pidunit.scope"
	startScope(t, m, units.Scope{Name: name, Description: "a delegated scope", PIDs: []int{p.pid()}, Delegate: true})
	u, err := m.UnitOfPID(context.Background(), p.pid())
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != name || !u.Delegate || u.ActiveState != "active" || u.ControlGroup == "" {
		t.Fatalf("UnitOfPID(%d) in %s = %+v; want it, Delegate, active, its cgroup", p.pid(), name, u)
	}
	// What a delegated scope's processes may do: a cgroup of their own
	// below it, named like a host service.
	sub := filepath.Join("/sys/fs/cgroup", u.ControlGroup, "victim.service")
	if m.Capabilities().Layout != units.Unified {
		sub = filepath.Join("/sys/fs/cgroup/systemd", u.ControlGroup, "victim.service")
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sub) })
	if err := os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := m.UnitOfPID(context.Background(), p.pid()); err != nil || got.Name != name {
		t.Errorf("UnitOfPID(%d) in %s's cgroup victim.service = %+v, %v; want %s", p.pid(), name, got, err, name)
	}
	if _, err := m.UnitOfPID(context.Background(), 0); err == nil || errors.Is(err, units.ErrNotFound) {
		t.Errorf("UnitOfPID(0) = %v; want a refusal of the pid", err)
	}
}
