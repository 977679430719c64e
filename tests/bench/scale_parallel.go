package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// parallelClients is how many clients create at once (the 8).
const parallelClients = 8

// timedCall is one call of a parallel run: when it ended and how long
// it took.
type timedCall struct {
	end  time.Time
	took time.Duration
}

// parallelRun is what clients creating (or destroying) at once did.
type parallelRun struct {
	calls   []timedCall // in the order they ended
	elapsed time.Duration
	ids     []string // the sandboxes made
}

// perSecond is the calls made a second, over the whole run.
func (r parallelRun) perSecond() float64 {
	return float64(len(r.calls)) / r.elapsed.Seconds()
}

// window is the calls whose end came between the from-th and to-th call
// (1-based), as a series, and their rate: the calls in it over the time
// from the end of the one before it to the end of its last.
func (r parallelRun) window(from, to int, start time.Time) (series, float64) {
	var s series
	for _, c := range r.calls[from-1 : to] {
		s = append(s, c.took)
	}
	begin := start
	if from > 1 {
		begin = r.calls[from-2].end
	}
	return s, float64(to-from+1) / r.calls[to-1].end.Sub(begin).Seconds()
}

// createParallel has parallelClients clients, each on its own bus
// connection, create sandboxes of project until n were made; any error
// ends the run.
func createParallel(ctx context.Context, project string, n int) (parallelRun, time.Time, error) {
	var mu sync.Mutex
	var run parallelRun
	left := n
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if left == 0 {
			return false
		}
		left--
		return true
	}
	start := time.Now()
	err := eachClient(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		m := conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
		for take() {
			var id string
			var object dbus.ObjectPath
			t0 := time.Now()
			call := m.CallWithContext(ctx, sandboxd1.ManagerInterface+".CreateSandbox", 0, project, map[string]dbus.Variant{})
			end := time.Now()
			if err := call.Store(&id, &object); err != nil {
				return fmt.Errorf("creating a sandbox of %s: %w", project, err)
			}
			mu.Lock()
			run.calls = append(run.calls, timedCall{end: end, took: end.Sub(t0)})
			run.ids = append(run.ids, id)
			mu.Unlock()
		}
		return nil
	})
	run.elapsed = time.Since(start)
	return run, start, err
}

// destroyParallel destroys ids with parallelClients clients at once.
func destroyParallel(ctx context.Context, ids []string) (parallelRun, error) {
	var mu sync.Mutex
	var run parallelRun
	next := 0
	take := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(ids) {
			return "", false
		}
		next++
		return ids[next-1], true
	}
	start := time.Now()
	err := eachClient(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		m := conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
		for id, ok := take(); ok; id, ok = take() {
			t0 := time.Now()
			if err := m.CallWithContext(ctx, sandboxd1.ManagerInterface+".DestroySandbox", 0, id).Err; err != nil {
				return fmt.Errorf("destroying sandbox %s: %w", id, err)
			}
			end := time.Now()
			mu.Lock()
			run.calls = append(run.calls, timedCall{end: end, took: end.Sub(t0)})
			mu.Unlock()
		}
		return nil
	})
	run.elapsed = time.Since(start)
	return run, err
}

// eachClient runs fn in parallelClients goroutines, each with a bus
// connection of its own, and returns their errors joined. The first
// error cancels the others.
func eachClient(ctx context.Context, fn func(context.Context, *dbus.Conn) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, parallelClients)
	var wg sync.WaitGroup
	for i := range parallelClients {
		wg.Go(func() {
			conn, err := dbus.ConnectSystemBus() // a connection of its own
			if err != nil {
				errs[i] = fmt.Errorf("connecting to the system bus: %w", err)
				cancel()
				return
			}
			defer conn.Close()
			if errs[i] = fn(ctx, conn); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
