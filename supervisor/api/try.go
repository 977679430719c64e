package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// errCallerGone ends a Try whose caller left the bus (Ctrl-C on
// sandboxctl try): nobody waits for its result, so its sandboxes go.
var errCallerGone = errors.New("the caller left the bus")

// errNoTry answers Try where the daemon serves no try room.
var errNoTry = errors.New("this daemon runs no Try")

// Try(s project, as variants, s check, s keep, a{sv} options) ->
// (s report): a sandbox of the project per variant (a shell line), or per
// input (Inputs), named PREFIX-1... (the Name option is the prefix), the
// variant then the check run in each, in parallel; the report is
// sandboxd1.TryReport as JSON. keep is "winner" (default), "all" or
// "none". The options are CreateSandbox's, Exec's (Environment,
// WorkingDirectory, Root, TimeoutUSec, Detach: for each step) and
// Inputs and Parallel. The call lasts as long as the slowest sandbox:
// give it a long timeout. A caller that leaves the bus stops it, and its
// sandboxes are destroyed. As each sandbox is done, the caller alone is
// sent TryVariantDone (tryVariantDone).
func (m manager) Try(sender dbus.Sender, project string, variants []string, check, keep string, opts map[string]dbus.Variant) (string, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "Try")
	if derr != nil {
		return "", derr
	}
	r.project = project
	if s.rooms.Try == nil {
		return "", s.end(r, "", dbusError(sandboxd1.ErrorFailed, "trying variants of %q: %v", project, errNoTry))
	}
	if !s.access.MayCreate(r.who) {
		return "", s.end(r, "", dbusError(sandboxd1.ErrorAccessDenied,
			"trying variants of %q: uid %d may not create sandboxes (not root, nor a creator by uid or group)", project, r.who.UID))
	}
	to, err := options.Try(opts)
	if err != nil {
		return "", s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs, "trying variants of %q: %v", project, err))
	}
	to.Create.Project, to.Create.Owner = project, r.who.UID
	if to.From != "" {
		src, derr := s.tryFrom(r, to.From)
		if derr != nil {
			return "", s.end(r, "", derr)
		}
		if project != "" && project != src.Project {
			return "", s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs,
				"trying variants in forks of sandbox %s: it is a sandbox of %q, not of %q: give its project or none", to.From, src.Project, project))
		}
		to.From, to.Create.Project, r.project = src.ID, src.Project, src.Project
	}
	to.Variants, to.Check, to.Keep = variants, check, keep
	// Its slot is held for its creates and diffs, not while its
	// variants and checks run (calls.Slot.Busy).
	to.Busy = r.slot.Busy
	n := max(len(variants), len(to.Inputs))
	to.Done = func(prefix string, i int, res try.Result) {
		s.tryVariantDone(string(sender), prefix, i, n, res)
	}
	ctx, stop := s.whileConnected(r.ctx, string(sender))
	rep, err := s.rooms.Try.Run(ctx, to)
	stop()
	if err != nil {
		return "", s.end(r, "", fromSupervisor(err))
	}
	text, err := json.Marshal(tryReport(rep))
	if err != nil {
		return "", s.end(r, "", dbusError(sandboxd1.ErrorFailed, "trying variants of %q: encoding the report: %v", project, err))
	}
	return string(text), s.end(r, "", nil)
}

// tryFrom is Try's From, a sandbox's id or name, as the caller may see
// it: the same answer for one that does not exist and another user's.
func (s *Server) tryFrom(r *request, from string) (state.Entry, *dbus.Error) {
	if len(from) > maxFindArg {
		return state.Entry{}, dbusError(sandboxd1.ErrorInvalidArgs, "option %s: a sandbox's id or name, at most %d bytes, not %d", sandboxd1.OptFrom, maxFindArg, len(from))
	}
	for _, e := range s.sup.Entries() {
		if (e.ID == from || e.Name == from) && r.who.Sees(e.Owner) && !e.Pool {
			return e, nil
		}
	}
	return state.Entry{}, noSuchSandbox(from)
}

// tryReport is rep as it crosses the bus.
func tryReport(rep try.Report) sandboxd1.TryReport {
	out := sandboxd1.TryReport{Results: []sandboxd1.TryResult{}, Winner: rep.Winner, Left: rep.Left}
	for _, r := range rep.Results {
		out.Results = append(out.Results, tryResult(r))
	}
	return out
}

// tryResult is one sandbox's result as it crosses the bus.
func tryResult(r try.Result) sandboxd1.TryResult {
	w := sandboxd1.TryResult{
		Name: r.Name, ID: r.ID, Command: r.Variant, Input: r.Input, Passed: r.Passed, Result: "pass",
		How: r.How, Status: int32(r.Status), Signal: int32(r.Signal),
		Seconds: r.Duration.Seconds(), CommandSeconds: r.CommandDuration.Seconds(), CheckSeconds: r.CheckDuration.Seconds(),
		Changed: r.Changes, Ignored: r.Ignored, DiskUsed: r.DiskUsed, MemoryPeak: r.MemoryPeak, Winner: r.Winner, Kept: r.Kept,
		CommandOutput: r.CommandOutput, CheckOutput: r.CheckOutput,
	}
	if r.FailedIn != "" {
		w.FailedIn = r.FailedIn
		if w.FailedIn == "variant" {
			w.FailedIn = "command" // the client's word for the variant's step
		}
		how := r.How
		switch r.How {
		case "exited":
			how = fmt.Sprintf("exit %d", r.Status)
		case "signaled":
			name := unix.SignalName(syscall.Signal(r.Signal))
			how = "signaled (" + cmp.Or(name, fmt.Sprintf("signal %d", r.Signal)) + ")"
		}
		w.Result = "fail (" + w.FailedIn + ": " + how + ")"
	}
	return w
}

// tryVariantDone sends TryVariantDone(s try, s variant) to dest, the
// Try's caller, alone: a unicast signal, as CommandExited is, so that no
// other connection learns of the Try. The steps' output stays in the
// report: the signal is small whatever the variant printed.
func (s *Server) tryVariantDone(dest, prefix string, i, n int, r try.Result) {
	v := sandboxd1.TryVariant{Index: i, Of: n, TryResult: tryResult(r)}
	v.CommandOutput, v.CheckOutput = nil, nil
	text, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encoding TryVariantDone", "sandbox", r.ID, "error", err)
		return
	}
	msg := &dbus.Message{
		Type: dbus.TypeSignal,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(sandboxd1.ManagerPath),
			dbus.FieldInterface:   dbus.MakeVariant(sandboxd1.ManagerInterface),
			dbus.FieldMember:      dbus.MakeVariant(sandboxd1.SignalTryVariantDone),
			dbus.FieldDestination: dbus.MakeVariant(dest),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(prefix, string(text))),
		},
		Body: []any{prefix, string(text)},
	}
	if call := s.conn.Send(msg, nil); call.Err != nil {
		s.log.Error("emitting a D-Bus signal", "signal", sandboxd1.SignalTryVariantDone, "caller", dest, "error", call.Err)
	}
}

// whileConnected is ctx, cancelled (errCallerGone) once sender leaves the
// bus: NameOwnerChanged with no new owner, or no owner at all when the
// watch begins. stop ends the watch.
func (s *Server) whileConnected(ctx context.Context, sender string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	match := []dbus.MatchOption{
		dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, sender),
	}
	if err := s.conn.AddMatchSignal(match...); err != nil {
		// Without the watch the Try still ends, as its calls do.
		s.log.Warn("watching a Try's caller", "caller", sender, "error", err)
		return ctx, func() { cancel(nil) }
	}
	signals := make(chan *dbus.Signal, 8)
	s.conn.Signal(signals)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig, ok := <-signals:
				if !ok {
					return
				}
				if sig.Name != "org.freedesktop.DBus.NameOwnerChanged" || len(sig.Body) != 3 {
					continue
				}
				if name, _ := sig.Body[0].(string); name == sender {
					if owner, _ := sig.Body[2].(string); owner == "" {
						cancel(errCallerGone)
					}
				}
			}
		}
	}()
	// It may have left before the match was in place.
	var has bool
	hctx, hdone := context.WithTimeout(ctx, 5*time.Second)
	if err := s.conn.BusObject().CallWithContext(hctx, "org.freedesktop.DBus.NameHasOwner", 0, sender).Store(&has); err == nil && !has {
		cancel(errCallerGone)
	}
	hdone()
	return ctx, func() {
		close(done)
		s.conn.RemoveSignal(signals)
		_ = s.conn.RemoveMatchSignal(match...)
		cancel(nil)
	}
}
