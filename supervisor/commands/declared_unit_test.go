package commands

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// A declaration the record would not hold is refused before anything
// runs, naming the bound; the record is unchanged.
func TestUnitDeclaredBounds(t *testing.T) {
	c, h := newUnit(t)
	big := ExecOptions{Argv: []string{"sh", "-c", strings.Repeat("x", MaxDeclaredBytes)}, UID: 1000, Restart: true}
	if _, err := c.Spawn(ctx, "sb1", big); !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), "more than 16384") {
		t.Errorf("a declaration of %d bytes: %v; want ErrInvalid naming the bound", MaxDeclaredBytes+8, err)
	}
	full := make([]state.Process, MaxDeclared)
	for i := range full {
		full[i] = state.Process{Argv: []string{"sleep", "1"}, ID: "p" + string(rune('a'+i))}
	}
	if _, err := h.S.Update("sb1", func(r *state.Record) error { r.Processes = full; return nil }); err != nil {
		t.Fatal(err)
	}
	o := ExecOptions{Argv: []string{"sleep", "60"}, UID: 1000, Restart: true}
	if _, err := c.Spawn(ctx, "sb1", o); !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "end one first") {
		t.Errorf("a 33rd declaration: %v; want ErrLimitReached saying what to do", err)
	}
	if rec, _ := h.S.Get("sb1"); len(rec.Processes) != MaxDeclared {
		t.Errorf("the record holds %d declarations after the refusals; want %d", len(rec.Processes), MaxDeclared)
	}
}

// An ending signal undeclares the process (also one its init no longer
// knows); another signal leaves it declared.
func TestUnitSignalUndeclares(t *testing.T) {
	c, h := newUnit(t)
	if err := os.MkdirAll(h.RuntimeDir("sb1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx, "sb1", deadPID(t), true); err != nil {
		t.Fatal(err)
	}
	decl := []state.Process{{Argv: []string{"a"}, ID: "pa"}, {Argv: []string{"b"}, ID: "pb"}}
	if _, err := h.S.Update("sb1", func(r *state.Record) error { r.Processes = decl; return nil }); err != nil {
		t.Fatal(err)
	}
	_ = c.SignalProcess(ctx, "sb1", "pa", syscall.SIGHUP) // no init answers: the error is not the point
	_ = c.SignalProcess(ctx, "sb1", "pb", syscall.SIGTERM)
	rec, _ := h.S.Get("sb1")
	if len(rec.Processes) != 1 || rec.Processes[0].ID != "pa" {
		t.Errorf("declared after SIGHUP to pa and SIGTERM to pb: %+v; want pa alone", rec.Processes)
	}
}

// A new init respawns the declared processes; one found again after a
// daemon's restart does not. Without an init to spawn in, each keeps
// its id (a caller may still end it by it).
func TestUnitRespawnOnlyOnNewInit(t *testing.T) {
	_, h := newUnit(t)
	decl := []state.Process{{Argv: []string{"sleep", "60"}, UID: 1000, ID: "pa"}}
	if _, err := h.S.Update("sb1", func(r *state.Record) error { r.Processes = decl; r.State = state.Stopped; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx, "sb1", deadPID(t), false); err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.S.Get("sb1"); len(rec.Processes) != 1 || rec.Processes[0].ID != "pa" {
		t.Errorf("after a failed respawn: %+v; want pa kept", rec.Processes)
	}
}

// deadPID is the pid of a process that ended: an init that is gone.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
