package audit

import (
	"context"
	"errors"
	"log/slog"
)

// Recorder records actions in a Log (nil: none) with their caller and
// result; a line it cannot write goes to the journal.
type Recorder struct {
	Log     *Log
	Journal *slog.Logger
	// Caller is the uid that asked in ctx (nil: the daemon itself).
	Caller func(ctx context.Context) *uint32
	// Refusals are the errors that are the caller's: what it asked is not
	// allowed, not there or not well formed. The log keeps them short and
	// budgets them apart from the caller's actions. More lists those
	// added later (the rooms').
	Refusals []error
	More     func() []error
}

// Record records e, filled with its caller and result (err).
func (r Recorder) Record(ctx context.Context, e Entry, err error) {
	e.CallerUID, e.Result = r.Caller(ctx), "ok"
	if err != nil {
		e.Result, e.Error, e.Refused = "error", err.Error(), r.refused(err)
	}
	if werr := r.Log.Record(e); werr != nil {
		r.Journal.Error("writing the audit log", "error", werr, "ACTION", e.Action, "SANDBOX_ID", e.Sandbox)
	}
}

func (r Recorder) refused(err error) bool {
	var more []error
	if r.More != nil {
		more = r.More()
	}
	for _, list := range [][]error{r.Refusals, more} {
		for _, x := range list {
			if errors.Is(err, x) {
				return true
			}
		}
	}
	return false
}
