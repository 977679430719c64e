package journal

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a buffer the budget's timer may write to while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// One caller's flood of refusals: 10 lines, then a count; another
// caller's refusal, root's, the daemon's own warning and a change made
// all still get through.
func TestBudgetCountsACallersRefusalsPastTen(t *testing.T) {
	var buf syncBuffer
	log := slog.New(Budget(NewHandler(&buf, slog.LevelInfo), BudgetLines, time.Hour))
	for i := range 500 {
		log.Warn("D-Bus call", "ACTION", "ReadFile", CallerKey, uint32(1000), "n", i)
	}
	log.Warn("D-Bus call", "ACTION", "ReadFile", CallerKey, uint32(1001))
	log.Warn("D-Bus call", "ACTION", "ReadFile", CallerKey, uint32(0))
	log.With(CallerKey, uint32(1000)).Error("a failed call of the same caller")
	log.Warn("the daemon's own warning")
	log.Info("D-Bus call", "ACTION", "CreateSandbox", CallerKey, uint32(1000), "result", "ok")
	out := buf.String()
	if n := strings.Count(out, "CALLER_UID=1000 n="); n != BudgetLines {
		t.Errorf("%d refusal lines of uid 1000; want %d:\n%s", n, BudgetLines, out)
	}
	for _, want := range []string{"CALLER_UID=1001", "CALLER_UID=0", "the daemon's own warning", "ACTION=CreateSandbox"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a failed call of the same caller") {
		t.Errorf("a line of uid 1000 past its budget was logged:\n%s", out)
	}
}

// The count comes by itself at the interval's end, or with the caller's
// next line let through.
func TestBudgetSaysHowManyWereLeftOut(t *testing.T) {
	var buf syncBuffer
	log := slog.New(Budget(NewHandler(&buf, slog.LevelInfo), 2, 300*time.Millisecond))
	for i := range 7 {
		log.Warn("refused", CallerKey, uint32(1000), "n", i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), "lines of a caller left out") {
		if time.Now().After(deadline) {
			t.Fatalf("no count 30 s after an interval of 300 ms:\n%s", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := buf.String(); !strings.Contains(out, "CALLER_UID=1000 left_out=5") {
		t.Fatalf("the count: want CALLER_UID=1000 left_out=5:\n%s", out)
	}
	// A caller whose next line comes after the interval: that line says.
	var buf2 syncBuffer
	b := Budget(NewHandler(&buf2, slog.LevelInfo), 1, time.Hour).(*budgeted)
	start := time.Now()
	for i := range 4 {
		r := slog.NewRecord(start, slog.LevelWarn, "refused", 0)
		r.AddAttrs(slog.Any(CallerKey, uint32(1000)), slog.Int("n", i))
		_ = b.Handle(t.Context(), r)
	}
	r := slog.NewRecord(start.Add(2*time.Hour), slog.LevelWarn, "refused later", 0)
	r.AddAttrs(slog.Any(CallerKey, uint32(1000)))
	_ = b.Handle(t.Context(), r)
	if out := buf2.String(); !strings.Contains(out, fmt.Sprintf("refused later\" %s=1000 %s=3", CallerKey, LeftOutKey)) {
		t.Fatalf("the later line: want left_out=3:\n%s", out)
	}
}

// Lines without a caller that anyone may cause (a port's refused
// connections, the guard's refusals) are budgeted apart from the
// daemon's own, which a flood of them used to leave out: all the lines
// without a caller shared one budget of 10 a minute.
func TestBudgetKeepsTheDaemonsOwnLinesFromOutsidersFloods(t *testing.T) {
	var buf syncBuffer
	log := slog.New(Budget(NewHandler(&buf, slog.LevelInfo), BudgetLines, time.Hour))
	for i := range 500 {
		log.Warn("exposed port refused a connection", "port", 8080, "n", i, "LOG_BUDGET", "exposed-port-refusals")
		log.Warn("refused a D-Bus call", "BUS_SENDER", fmt.Sprintf(":1.%d", i), "n", i)
	}
	log.Error("writing the audit log", "error", "no space left on device")
	log.Warn("promotion failed", "promotion", "p1")
	out := buf.String()
	for _, want := range []string{"writing the audit log", "promotion failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the daemon's own line %q was left out after outsiders' floods", want)
		}
	}
	if n := strings.Count(out, "exposed port refused a connection"); n != BudgetLines {
		t.Errorf("%d lines of refused connections; want %d", n, BudgetLines)
	}
	if n := strings.Count(out, "refused a D-Bus call"); n != BudgetLines {
		t.Errorf("%d lines of the guard's refusals; want %d", n, BudgetLines)
	}
}
