package verb

import (
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Every verb's --json gives a time one way: RFC 3339 in UTC, to the
// microsecond the daemon keeps (2026-11-22T06:10:30.976813Z); a time
// that is not there (a running process's end) is null. The wire's lists
// carry microseconds since the epoch: Output.JSON turns them, so that no
// verb prints them raw.

// JSONTime is t as --json gives it.
func JSONTime(t time.Time) time.Time { return t.UTC() }

// JSONMicros is a time the daemon sends in microseconds since the epoch,
// as --json gives it; nil for 0, none.
func JSONMicros(us uint64) *time.Time {
	if us == 0 {
		return nil
	}
	t := JSONTime(FromMicros(us))
	return &t
}

// The wire's list entries with their times as --json gives them: the
// outer field hides the embedded one of the same name.
type (
	checkpointJSON struct {
		sandboxd1.CheckpointEntry
		Created *time.Time `json:"created"`
	}
	promotionEntryJSON struct {
		sandboxd1.PromotionEntry
		Created *time.Time `json:"created"`
	}
	processJSON struct {
		sandboxd1.ProcessEntry
		Started *time.Time `json:"started"`
		Ended   *time.Time `json:"ended"`
	}
)

// jsonTimes is v with the wire's times as --json gives them.
func jsonTimes(v any) any {
	switch v := v.(type) {
	case time.Time:
		return JSONTime(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = jsonTimes(x)
		}
		return out
	case []sandboxd1.CheckpointEntry:
		return convert(v, func(e sandboxd1.CheckpointEntry) checkpointJSON { return checkpointJSON{e, JSONMicros(e.Created)} })
	case []sandboxd1.PromotionEntry:
		return convert(v, func(e sandboxd1.PromotionEntry) promotionEntryJSON {
			return promotionEntryJSON{e, JSONMicros(e.Created)}
		})
	case sandboxd1.Promotion:
		return promotionUTC(v)
	case *sandboxd1.Promotion:
		if v != nil {
			return promotionUTC(*v)
		}
	case []sandboxd1.ProcessEntry:
		return convert(v, func(e sandboxd1.ProcessEntry) processJSON {
			return processJSON{e, JSONMicros(e.Started), JSONMicros(e.Ended)}
		})
	}
	return v
}

// promotionUTC is p, RFC 3339 already, with its times in UTC.
func promotionUTC(p sandboxd1.Promotion) sandboxd1.Promotion {
	p.Created, p.Updated = p.Created.UTC(), p.Updated.UTC()
	stages := make([]sandboxd1.StageRun, len(p.Stages))
	for i, s := range p.Stages {
		s.Started, s.Ended, s.Decided = s.Started.UTC(), s.Ended.UTC(), s.Decided.UTC()
		stages[i] = s
	}
	if p.Stages != nil {
		p.Stages = stages
	}
	return p
}

func convert[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}
