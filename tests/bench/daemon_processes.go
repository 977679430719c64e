package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Background processes and ports (issue 21), in one sandbox without a
// user namespace: Spawn until it replies, ReadLog of 64 KiB, and a web
// server in the sandbox reached through its exposed port (see
// daemon_ports.go), each beside what the bench does directly.

// processesNote says, under the daemon's table, how its rows of
// processes and ports were measured.
const processesNote = "The rows of background processes and ports come from one sandbox of the 1k project without a user namespace, after the rows above: " +
	"each `Spawn` is timed from the call to its reply, beside `/bin/true` forked by the bench; " +
	"`ReadLog` reads the whole log of a process that wrote 64 KiB and ended; " +
	"the web server is `python3 -m http.server` (HTTP/1.0, a thread per connection), in the sandbox (network none) and run by the bench outside it, each serving files of /dev/urandom on a tmpfs; " +
	"the bench's Go client fetches through each route in turn, run by run and request by request, a new connection for each, after one untimed fetch through each; " +
	"a download's time is until its last byte is read, and requests/s is the requests over the sum of their times. " +
	"In these rows ÷ is the row's median over its baseline's."

const (
	spawnRuns = 100
	// spawnBatch processes run at once: a sandbox keeps at most 64
	// running, so the spawns go in batches, each killed before the next.
	spawnBatch  = 50
	readLogRuns = 200
	logBytes    = 64 << 10 // what the logged process writes, and ReadLog's largest read
)

// benchProcesses adds the rows of background processes and exposed
// ports, measured in one new sandbox of the project of n files, made on
// a settled filesystem.
func benchProcesses(ctx context.Context, d *daemon, t *table, fs *btrfsFS, n int) (err error) {
	if err := fs.settle(ctx); err != nil {
		return err
	}
	begin := time.Now()
	id, err := d.create(ctx, projectName(n))
	if err != nil {
		return err
	}
	// Its processes, and its port, end with it.
	defer func() {
		err = errors.Join(err, d.destroy(context.WithoutCancel(ctx), id))
	}()
	if err := benchSpawn(ctx, d, t, n, id); err != nil {
		return err
	}
	if err := benchReadLog(ctx, d, t, n, id); err != nil {
		return err
	}
	if err := benchPorts(ctx, d, t, n, id); err != nil {
		return err
	}
	progress("processes and ports: %v", time.Since(begin).Round(time.Millisecond))
	return nil
}

// benchSpawn times spawnRuns Spawn calls of `sleep 600`, each beside
// `/bin/true` forked and waited for by the bench (the runtime rows'
// baseline), after one untimed spawn.
func benchSpawn(ctx context.Context, d *daemon, t *table, n int, id string) error {
	sleep := []string{"sleep", "600"}
	warm, err := d.spawn(ctx, id, sleep...)
	if err != nil {
		return fmt.Errorf("spawn (warm-up): %w", err)
	}
	if err := d.killAll(ctx, id, []string{warm}); err != nil {
		return err
	}
	var spawns, direct series
	for len(spawns) < spawnRuns {
		var batch []string
		for range min(spawnBatch, spawnRuns-len(spawns)) {
			dt, err := timed(func() error { return exec.CommandContext(ctx, "/bin/true").Run() })
			if err != nil {
				return fmt.Errorf("running /bin/true: %w", err)
			}
			var proc string
			ds, err := timed(func() (err error) {
				proc, err = d.spawn(ctx, id, sleep...)
				return err
			})
			if err != nil {
				return fmt.Errorf("spawn %d: %w", len(spawns)+1, err)
			}
			spawns, direct, batch = append(spawns, ds), append(direct, dt), append(batch, proc)
		}
		if err := d.killAll(ctx, id, batch); err != nil {
			return err
		}
	}
	progress("spawn: warm-up and %d spawns", len(spawns))
	over := spawns.median() - direct.median()
	t.add(row{fs: "btrfs", files: n, s: spawns,
		op: fmt.Sprintf("`Spawn` of `sleep 600` in a live sandbox without a user namespace, until it replies (the process runs then), %d in batches of %d, each batch killed (`SignalProcess` 9) before the next: %s ms over the baseline (`/bin/true` forked and waited for by the bench beside each call: %s ms)",
			len(spawns), spawnBatch, ms(over), ms(direct.median())),
		ratio: ratio(spawns.median(), direct.median()), verdict: "no target"})
	return nil
}

// benchReadLog times readLogRuns ReadLog calls of logBytes from offset 0
// of a process that wrote logBytes and ended, each beside a ReadLog of 1
// byte: the call's cost without the data.
func benchReadLog(ctx context.Context, d *daemon, t *table, n int, id string) error {
	proc, err := d.runToEnd(ctx, id, "head", "-c", fmt.Sprint(logBytes), "/dev/urandom")
	if err != nil {
		return err
	}
	var reads, tiny series
	err = (loop{reps: readLogRuns, min: readLogRuns}).run(ctx, "ReadLog", func(warm bool) error {
		var times [2]time.Duration
		for i, size := range []uint32{1, logBytes} {
			var data []byte
			dt, err := timed(func() (err error) {
				data, _, _, err = d.readLog(ctx, id, proc, 0, size)
				return err
			})
			if err != nil {
				return err
			}
			if len(data) != int(size) {
				return fmt.Errorf("ReadLog of %d bytes from 0 gave %d", size, len(data))
			}
			times[i] = dt
		}
		if !warm {
			tiny, reads = append(tiny, times[0]), append(reads, times[1])
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.add(row{fs: "btrfs", files: n, s: tiny,
		op: fmt.Sprintf("`ReadLog` of 1 byte from offset 0 of that log, beside each of the row below (the call without its data), %d calls", len(tiny)), verdict: "no target"})
	t.add(row{fs: "btrfs", files: n, s: reads,
		op: fmt.Sprintf("`ReadLog` of %d KiB from offset 0, of a process that wrote %d KiB and ended, %d calls: %s",
			logBytes>>10, logBytes>>10, len(reads), mbps(logBytes, reads.median())),
		ratio: ratio(reads.median(), tiny.median()), verdict: "no target"})
	return nil
}

// mbps is a throughput of size bytes in d, in MB/s (10⁶ bytes).
func mbps(size int64, d time.Duration) string {
	if d <= 0 {
		return "– MB/s"
	}
	return fmt.Sprintf("%.0f MB/s", float64(size)/1e6/d.Seconds())
}

func (d *daemon) sandbox(id string) dbus.BusObject {
	return d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id))
}

// call calls a method of sandbox id, within callTimeout, and stores its
// reply in out.
func (d *daemon) call(ctx context.Context, id, method string, args []any, out ...any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c := d.sandbox(id).CallWithContext(ctx, sandboxd1.Member(sandboxd1.SandboxInterface, method), 0, args...)
	if c.Err != nil {
		return fmt.Errorf("calling %s in sandbox %s: %w", method, id, c.Err)
	}
	if len(out) == 0 {
		return nil
	}
	if err := c.Store(out...); err != nil {
		return fmt.Errorf("reading the reply of %s in sandbox %s: %w", method, id, err)
	}
	return nil
}

// spawn starts argv in the background in sandbox id; the reply comes
// once it runs.
func (d *daemon) spawn(ctx context.Context, id string, argv ...string) (string, error) {
	var proc string
	err := d.call(ctx, id, sandboxd1.MethodSpawn, []any{argv, map[string]dbus.Variant{}}, &proc)
	return proc, err
}

func (d *daemon) readLog(ctx context.Context, id, proc string, offset uint64, max uint32) (data []byte, next uint64, ended bool, err error) {
	err = d.call(ctx, id, sandboxd1.MethodReadLog, []any{proc, offset, max}, &data, &next, &ended)
	return data, next, ended, err
}

func (d *daemon) processes(ctx context.Context, id string) ([]sandboxd1.ProcessEntry, error) {
	var ps []sandboxd1.ProcessEntry
	err := d.call(ctx, id, sandboxd1.MethodListProcesses, nil, &ps)
	return ps, err
}

// waitEnded waits until ListProcesses says each of procs has ended, and
// returns their entries.
func (d *daemon) waitEnded(ctx context.Context, id string, procs []string) (map[string]sandboxd1.ProcessEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	for {
		ps, err := d.processes(ctx, id)
		if err != nil {
			return nil, err
		}
		ended := map[string]sandboxd1.ProcessEntry{}
		for _, p := range ps {
			if p.Ended != 0 && slices.Contains(procs, p.ID) {
				ended[p.ID] = p
			}
		}
		if len(ended) == len(procs) {
			return ended, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d processes of sandbox %s to end: %d have: %w", len(procs), id, len(ended), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killAll sends SIGKILL to each of procs and waits until all have ended.
func (d *daemon) killAll(ctx context.Context, id string, procs []string) error {
	for _, p := range procs {
		if err := d.call(ctx, id, sandboxd1.MethodSignalProcess, []any{p, int32(9)}); err != nil {
			return err
		}
	}
	_, err := d.waitEnded(ctx, id, procs)
	return err
}

// runToEnd spawns argv in sandbox id and waits until it has exited with
// status 0; its log says why not.
func (d *daemon) runToEnd(ctx context.Context, id string, argv ...string) (string, error) {
	proc, err := d.spawn(ctx, id, argv...)
	if err != nil {
		return "", err
	}
	ended, err := d.waitEnded(ctx, id, []string{proc})
	if err != nil {
		return "", err
	}
	if p := ended[proc]; p.How != "exited" || p.Status != 0 {
		out, _, _, _ := d.readLog(ctx, id, proc, 0, logBytes)
		return "", fmt.Errorf("%q in sandbox %s: %s, status %d: %q", argv, id, p.How, p.Status, out)
	}
	return proc, nil
}
