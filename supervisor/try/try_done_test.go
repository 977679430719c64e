package try_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// Done tells each sandbox as it is done, before the others end: the
// second variant waits until the first's Done came. Each is told once,
// with its place, the prefix the room chose (none given), and its
// result but the winner, which only the end decides.
func TestUnitTryTellsEachSandboxAsItIsDone(t *testing.T) {
	firstDone := make(chan struct{})
	run := &runner{fn: func(ctx context.Context, _ string, o commands.ExecOptions) (commands.Captured, error) {
		switch line(o) {
		case "waits for the first":
			select {
			case <-firstDone:
			case <-ctx.Done():
				return commands.Captured{}, ctx.Err()
			case <-time.After(time.Minute): // a safety net
				t.Error("the first sandbox's Done never came while the second ran")
			}
			return exited(0, time.Millisecond, ""), nil
		case "fails":
			return exited(2, time.Millisecond, ""), nil
		}
		return exited(0, time.Millisecond, ""), nil
	}}
	room, _ := newUnit(t, run)
	var (
		mu   sync.Mutex
		told []int
	)
	rep, err := room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web"},
		Variants: []string{"fails", "waits for the first"}, Check: "true", Parallel: 2,
		Done: func(prefix string, i int, r try.Result) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, i)
			if !strings.HasPrefix(prefix, "try-") || r.Name != prefix+"-"+string(rune('1'+i)) || r.ID == "" || r.Winner || r.Kept {
				t.Errorf("Done(%q, %d, %+v)", prefix, i, r)
			}
			if i == 0 {
				if r.Passed || r.FailedIn != "variant" || r.Status != 2 {
					t.Errorf("the failed variant as Done tells it: %+v", r)
				}
				close(firstDone)
			} else if !r.Passed {
				t.Errorf("the passing variant as Done tells it: %+v", r)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0] != 0 || told[1] != 1 {
		t.Fatalf("Done told %v, want 0 then 1", told)
	}
	if rep.Winner != 1 {
		t.Fatalf("winner %d, want 1", rep.Winner)
	}
}
