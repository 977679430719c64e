package replica

// A stage whose target is a path (on this host or, over ssh, on another)
// is kept as a replica: sandboxd sends it btrfs send streams and switches
// the target path to what it received. Every operation is one shell script
// run on the replica's host, through a transport (`sh -c` here, `ssh` there),
// so the same scripts serve both.
//
// The store for a target path P is the sibling directory
// dirname(P)/.BASENAME.sandboxd/. Its entries, each named KIND-NAME (NAME is
// a received snapshot's name, which holds no '~' or ':'):
//
//	recv-NAME/<subvol>   a received read-only snapshot, in a directory of its
//	                     own so that it is never moved (btrfs will not move a
//	                     read-only subvolume, and a snapshot of it would lose
//	                     the received UUID that incremental receives look for)
//	part-NAME~ID/        a receive in progress; part-NAME~ID.lock is flocked
//	                     while it runs
//	next-NAME            a writable snapshot of recv-NAME, about to become P
//	prev-NAME            what P held before the switch to NAME (prev:NAME)
//	gone-NAME            what P held before Revert(prev:NAME) put prev back
//	check-ID             a writable snapshot of P a check runs in;
//	                     check-ID.lock is flocked while it runs
//	lock                 flocked around every change to the store and to P
//
// Switching is two renames (P -> prev-NAME, next-NAME -> P), reverting is
// two renames too (P -> gone-NAME, prev-NAME -> P). Each decides what to do
// from what it finds, so that after a crash at any point, running the same
// operation again finishes it; P is missing only between the two renames.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// Conditions a caller of Replica branches on, besides ErrInvalidTarget
// and cowfs's ErrNotFound (no such received snapshot or prev), ErrExists
// (received already), ErrInvalidName, ErrUnsupported (a ZFS replica),
// ErrUnsupportedFS (the target's directory is not on btrfs),
// ErrNotVolume, ErrCorruptStream and ErrNoSpace.
var (
	// ErrUnreachable: ssh could not reach or log in to the replica's
	// host (ssh exited with status 255).
	ErrUnreachable = errors.New("replica unreachable")
	// ErrBusy: another operation held the replica's lock too long.
	ErrBusy = errors.New("replica busy")
	// ErrInterrupted: the target path is missing because a switch or
	// revert was interrupted; running that operation again finishes it.
	ErrInterrupted = errors.New("interrupted switch or revert")
)

// Replica is a path or ssh target kept as a btrfs replica. The target's
// directory must be on btrfs, and the target itself a subvolume that is
// not a mount point (Switch renames it). The scripts run as the ssh user
// (as the daemon's user for a path target), who must be able to receive,
// snapshot and delete subvolumes there: root in practice. The replica's
// host needs sh, btrfs-progs, GNU coreutils and findutils, and util-linux
// (flock, setsid). Operations on one replica from several processes are
// serialised by a lock in its store; each ssh operation is one connection
// (about 0.3s on the testbed).
type Replica struct {
	Target Target
	// SSHOptions are extra ssh arguments from the config, e.g. -i KEY
	// -o UserKnownHostsFile=FILE. They come before sandboxd's own -o
	// options, so they win where both set one (ssh keeps the first value).
	SSHOptions []string
	// Backend is the backend of the replica's filesystem: "btrfs" (or
	// empty, which means btrfs). A "zfs" replica is not supported yet.
	Backend string
}

// prevPrefix starts the names Switch returns and Revert takes.
const prevPrefix = "prev:"

// checkStatusPrefix starts the line on which the check script reports the
// check's exit status, the last on its standard error.
const checkStatusPrefix = "sandboxd-check-status "

// Has reports whether the replica holds received snapshot name.
func (r *Replica) Has(ctx context.Context, name string) (bool, error) {
	what := "checking whether it holds " + name
	if err := r.ready(what, name); err != nil {
		return false, err
	}
	res := r.run(ctx, r.script(hasScript, "N", name), nil, nil)
	if err := r.failure(ctx, what, res); err != nil {
		return false, err
	}
	switch strings.TrimSpace(res.stdout) {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("replica %s: %s: unexpected answer %q", r.Target, what, strings.TrimSpace(res.stdout))
}

// Receive runs `btrfs receive` on the replica's host into its store,
// feeding it what send writes (a btrfs send stream of one snapshot, full or
// incremental from one the replica holds). The received snapshot is kept
// only if send returns nil, the stream checks out to its end, and btrfs
// receive succeeds: on any failure, nothing of it is left there. A name
// received already is cowfs.ErrExists. send must return once ctx ends (it
// gets a write error once the receiving side has gone).
func (r *Replica) Receive(ctx context.Context, name string, send func(io.Writer) error) error {
	what := "receiving " + name
	if err := r.ready(what, name); err != nil {
		return err
	}
	id, err := uniqueID()
	if err != nil {
		return fmt.Errorf("replica %s: %s: %w", r.Target, what, err)
	}
	var sendErr, streamErr error
	var replica *firstErrWriter
	feed := func(stdin io.Writer) error {
		// Our own parser reads the stream on the way, so that a stream cut
		// short between two commands is not taken for a whole one.
		pr, pw := io.Pipe()
		checked := make(chan error, 1)
		go func() {
			err := sendstream.Check(pr)
			_, _ = io.Copy(io.Discard, pr)
			checked <- err
		}()
		replica = &firstErrWriter{w: stdin}
		sendErr = send(io.MultiWriter(replica, pw))
		pw.Close()
		streamErr = <-checked
		if sendErr != nil || streamErr != nil || replica.err != nil {
			return nil // closing stdin without the word aborts the receive
		}
		// btrfs receive -e stops reading at the stream's end command; the
		// script then reads this line, and keeps the snapshot only with it.
		_, err := io.WriteString(stdin, "commit\n")
		return err
	}
	res := r.run(ctx, r.script(receiveScript, "N", name, "ID", id), nil, feed)
	remote := r.failure(ctx, what, res)
	var local error
	var doing string
	switch {
	case ctx.Err() != nil:
	case replica != nil && replica.err != nil:
		// The replica stopped reading the stream: its error says why, and
		// what this side saw of the stream after that is beside the point.
	case sendErr != nil:
		local, doing = sendErr, "sending"
	case streamErr != nil:
		local, doing = streamErr, "checking the stream"
	}
	switch {
	case local == nil:
		return remote
	case remote == nil || res.code == exitAborted:
		// The replica did all it was asked: the fault is on this side.
		return fmt.Errorf("replica %s: %s: %s: %w", r.Target, what, doing, local)
	default:
		// Both sides failed; a stream cut short here made the receive fail.
		return fmt.Errorf("%w (%s: %w)", remote, doing, local)
	}
}

// firstErrWriter keeps the first error of writes to w.
type firstErrWriter struct {
	w   io.Writer
	err error
}

func (e *firstErrWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// Switch makes the target path hold a writable snapshot of received
// snapshot name, keeping what was there as prev ("prev:NAME"), which Revert
// takes. The first switch of a target that does not exist makes it (an
// empty subvolume, kept as prev). It is idempotent: after a crash at any
// point, calling it again finishes it; a switch done already returns the
// same prev ("" if that was forgotten since). The target path is missing
// only between its two renames.
func (r *Replica) Switch(ctx context.Context, name string) (prev string, err error) {
	what := "switching the target to " + name
	if err := r.ready(what, name); err != nil {
		return "", err
	}
	res := r.run(ctx, r.script(switchScript, "N", name), nil, nil)
	if err := r.failure(ctx, what, res); err != nil {
		return "", err
	}
	prev = lastLine(res.stdout)
	if prev != "" && prev != prevPrefix+name {
		return "", fmt.Errorf("replica %s: %s: unexpected answer %q", r.Target, what, prev)
	}
	return prev, nil
}

// Revert puts prev (as Switch returned it) back at the target path. What
// the target held is kept until Forget of prev or of the name switched to.
// It is idempotent: after a crash at any point, calling it again finishes
// it, and a revert done already returns nil.
func (r *Replica) Revert(ctx context.Context, prev string) error {
	what := "reverting the target to " + prev
	name, ok := strings.CutPrefix(prev, prevPrefix)
	if !ok {
		return fmt.Errorf("replica %s: %s: not a name Switch returned (prev:NAME): %w", r.Target, what, cowfs.ErrInvalidName)
	}
	if err := r.ready(what, name); err != nil {
		return err
	}
	res := r.run(ctx, r.script(revertScript, "N", name), nil, nil)
	return r.failure(ctx, what, res)
}

// Check runs command (with sh -c, as the ssh user on an ssh target) in a
// new writable snapshot of the target's current state, never in the target
// itself: its working directory is that snapshot (in the store, beside the
// target), which is deleted afterwards. Its standard output and error go
// to out; its standard input is empty. It returns the command's exit
// status (0: passed), and an error only if the command could not be run.
// Cancelling ctx kills it (its whole session), on the replica's host too.
// The snapshot is not a sandbox: a check that writes to the target's own
// path, by its absolute name, reaches the target.
func (r *Replica) Check(ctx context.Context, command string, out io.Writer) (status int, err error) {
	what := fmt.Sprintf("running check %.80q", command)
	if err := r.ready(what); err != nil {
		return -1, err
	}
	id, err := uniqueID()
	if err != nil {
		return -1, fmt.Errorf("replica %s: %s: %w", r.Target, what, err)
	}
	if out == nil {
		out = io.Discard
	}
	res := r.run(ctx, r.script(checkScript, "ID", id, "CMD", command), out, nil)
	if err := r.failure(ctx, what, res); err != nil {
		return -1, err
	}
	line := lastLine(res.stderr)
	s, ok := strings.CutPrefix(line, checkStatusPrefix)
	if !ok {
		return -1, fmt.Errorf("replica %s: %s: the check script ended without the check's status (last line %q)", r.Target, what, line)
	}
	status, err = strconv.Atoi(s)
	if err != nil {
		return -1, fmt.Errorf("replica %s: %s: reading the check's status %q: %w", r.Target, what, s, err)
	}
	return status, nil
}

// Forget deletes what the replica keeps for each of names: a received
// snapshot's name deletes it and what Switch and Revert kept of it (next-,
// gone-, unfinished receives); a prev ("prev:NAME") deletes that tree. It
// also removes what interrupted checks and receives left. It refuses while
// the target is missing after an interrupted switch or revert.
func (r *Replica) Forget(ctx context.Context, names ...string) error {
	what := "forgetting " + strings.Join(names, ", ")
	if len(names) == 0 {
		what = "removing what interrupted operations left"
	}
	if err := r.ready(what); err != nil {
		return err
	}
	var body strings.Builder
	body.WriteString(forgetScript)
	for _, n := range names {
		if name, ok := strings.CutPrefix(n, prevPrefix); ok {
			if err := cowfs.ValidateName(name); err != nil {
				return fmt.Errorf("replica %s: %s: %w", r.Target, what, err)
			}
			fmt.Fprintf(&body, "forget_prev %s\n", shellQuote(name))
			continue
		}
		if err := cowfs.ValidateName(n); err != nil {
			return fmt.Errorf("replica %s: %s: %w", r.Target, what, err)
		}
		fmt.Fprintf(&body, "forget_recv %s\n", shellQuote(n))
	}
	res := r.run(ctx, r.script(body.String()), nil, nil)
	return r.failure(ctx, what, res)
}

// ready checks the replica's backend and target and the names an
// operation is about.
func (r *Replica) ready(what string, names ...string) error {
	switch r.Backend {
	case "", "btrfs":
	case "zfs":
		return fmt.Errorf("replica %s: %s: ZFS replicas are not supported yet, only btrfs ones: %w", r.Target, what, cowfs.ErrUnsupported)
	default:
		return fmt.Errorf("replica %s: %s: unknown backend %q: %w", r.Target, what, r.Backend, cowfs.ErrUnsupported)
	}
	if r.Target.Kind == TargetProject {
		return fmt.Errorf("replica %s: %s: the project is not a replica: %w", r.Target, what, ErrInvalidTarget)
	}
	if err := r.Target.validate(); err != nil {
		return fmt.Errorf("replica %s: %s: %v: %w", r.Target, what, err, ErrInvalidTarget)
	}
	for _, name := range names {
		if err := cowfs.ValidateName(name); err != nil {
			return fmt.Errorf("replica %s: %s: %w", r.Target, what, err)
		}
	}
	return nil
}

// paths returns the target path, its directory and its store.
func (r *Replica) paths() (target, dir, store string) {
	target = path.Clean(r.Target.Path)
	dir = path.Dir(target)
	return target, dir, path.Join(dir, "."+path.Base(target)+".sandboxd")
}

// script is the shell script for an operation: the variables (the
// target P, its directory D, its store S, then vars as name, value pairs),
// the exit statuses, the shared functions, then body.
func (r *Replica) script(body string, vars ...string) string {
	target, dir, store := r.paths()
	var b strings.Builder
	vars = append([]string{"P", target, "D", dir, "S", store}, vars...)
	for i := 0; i+1 < len(vars); i += 2 {
		fmt.Fprintf(&b, "%s=%s\n", vars[i], shellQuote(vars[i+1]))
	}
	b.WriteString(scriptPrelude)
	b.WriteString(scriptFunctions)
	b.WriteString(body)
	return b.String()
}

// shellQuote quotes s for a POSIX shell: s in single quotes, each single
// quote in it closed, escaped with a backslash and reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// uniqueID names a receive's or check's entries in the store.
func uniqueID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a unique name: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// command is the transport: script run by sh -c here, or by ssh on the
// target's host. It runs in a process group of its own, which cancelling
// ctx sends SIGTERM (the scripts clean up on it), then SIGKILL to the
// leader after a grace period.
func (r *Replica) command(ctx context.Context, script string) *exec.Cmd {
	var cmd *exec.Cmd
	if r.Target.Kind == TargetSSH {
		cmd = exec.CommandContext(ctx, "ssh", r.sshArgs(script)...)
	} else {
		cmd = exec.CommandContext(ctx, "sh", "-c", script)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// sshArgs are ssh's arguments to run script on the target's host. The
// remote command is `sh -c SCRIPT`, whatever the user's login shell.
func (r *Replica) sshArgs(script string) []string {
	args := []string{"-o", "BatchMode=yes"}
	if r.Target.Port != "" {
		args = append(args, "-p", r.Target.Port)
	}
	args = append(args, r.SSHOptions...)
	// After the config's options, which win where they set the same one.
	args = append(args, "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4")
	dest := r.Target.Host
	if r.Target.User != "" {
		dest = r.Target.User + "@" + dest
	}
	return append(args, "--", dest, "sh -c "+shellQuote(script))
}

// scriptResult is one run of a script.
type scriptResult struct {
	stdout string // when not streamed to a writer
	stderr string // its last lines
	code   int    // exit status; -1 when it did not start or was killed
	err    error  // from starting or waiting
}

// run runs script through the transport. Its standard output goes to
// stdout (captured when nil). Its standard input is a pipe that feed
// writes (then it is closed) or, without feed, that stays open while the
// script runs: the check script takes its end as the sign that sandboxd
// went away.
func (r *Replica) run(ctx context.Context, script string, stdout io.Writer, feed func(io.Writer) error) scriptResult {
	cmd := r.command(ctx, script)
	var captured bytes.Buffer
	cmd.Stdout = &captured
	if stdout != nil {
		cmd.Stdout = stdout
	}
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return scriptResult{code: -1, err: err}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return scriptResult{code: -1, err: fmt.Errorf("starting %s: %w", cmd.Args[0], err)}
	}
	fed := make(chan error, 1)
	if feed != nil {
		go func() {
			err := feed(stdin)
			stdin.Close()
			fed <- err
		}()
	}
	err = cmd.Wait()
	if feed != nil {
		if ferr := <-fed; err == nil && ferr != nil {
			err = fmt.Errorf("writing to %s: %w", cmd.Args[0], ferr)
		}
	}
	res := scriptResult{stdout: captured.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode(), err: err}
	slog.Default().LogAttrs(ctx, slog.LevelDebug, "replica",
		slog.String("target", r.Target.String()),
		slog.Duration("took", time.Since(start)),
		slog.Int("status", res.code))
	return res
}

// failure turns a run that failed into an error naming the target, what
// was being done, and the last lines of what the script (or ssh) printed
// on its standard error; nil when the run succeeded.
func (r *Replica) failure(ctx context.Context, what string, res scriptResult) error {
	if res.err == nil && res.code == 0 {
		return nil
	}
	detail := lastLines(res.stderr, 5)
	switch {
	case detail == "" && ctx.Err() != nil:
		detail = "stopped"
	case detail == "" && res.err != nil:
		detail = res.err.Error()
	}
	var cause error
	switch {
	case ctx.Err() != nil:
		cause = ctx.Err()
	case res.code == exitSSH && r.Target.Kind == TargetSSH:
		detail = "cannot reach the host or log in: " + detail
		cause = ErrUnreachable
	case statusError(res.code) != nil:
		cause = statusError(res.code)
	case strings.Contains(res.stderr, "No space left on device"):
		cause = cowfs.ErrNoSpace
	case res.err != nil:
		cause = res.err
	default:
		cause = fmt.Errorf("exit status %d", res.code)
	}
	return fmt.Errorf("replica %s: %s: %s: %w", r.Target, what, detail, cause)
}

// tailBuffer keeps the last max bytes written to it (at least).
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// lastLines returns the last n non-empty lines of s, joined by "; ".
func lastLines(s string, n int) string {
	var lines []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string { return lastLines(s, 1) }
