package promote

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
	"net/netip"
	"net/url"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// Conditions a caller of Replica branches on, besides cowfs's ErrNotFound
// (no such received snapshot or prev), ErrExists (received already),
// ErrInvalidName, ErrUnsupported (a ZFS replica), ErrUnsupportedFS (the
// target's directory is not on btrfs), ErrNotVolume, ErrCorruptStream and
// ErrNoSpace.
var (
	// ErrInvalidTarget: a stage target that is not `project`, an absolute
	// path or ssh://[user@]host[:port]/path.
	ErrInvalidTarget = errors.New("invalid stage target")
	// ErrReplicaUnreachable: ssh could not reach or log in to the replica's
	// host (ssh exited with status 255).
	ErrReplicaUnreachable = errors.New("replica unreachable")
	// ErrReplicaBusy: another operation held the replica's lock too long.
	ErrReplicaBusy = errors.New("replica busy")
	// ErrReplicaInterrupted: the target path is missing because a switch or
	// revert was interrupted; running that operation again finishes it.
	ErrReplicaInterrupted = errors.New("interrupted switch or revert")
)

// TargetKind says what a stage's target is.
type TargetKind int

const (
	// TargetProject is the sandbox's own project.
	TargetProject TargetKind = iota + 1
	// TargetPath is a path on this host, kept as a replica.
	TargetPath
	// TargetSSH is a path on another host, reached by ssh, kept as a replica.
	TargetSSH
)

func (k TargetKind) String() string {
	switch k {
	case TargetProject:
		return "project"
	case TargetPath:
		return "path"
	case TargetSSH:
		return "ssh"
	}
	return "TargetKind(" + strconv.Itoa(int(k)) + ")"
}

// Target is where a stage promotes to.
type Target struct {
	Kind TargetKind
	// User, Host and Port are those of an ssh target (User and Port may be
	// empty: ssh's defaults).
	User, Host, Port string
	// Path is the target path (absolute, clean) of a path or ssh target.
	Path string
}

const targetForms = "a target is `project`, an absolute path or ssh://[user@]host[:port]/path"

// ParseTarget reads a stage target: "project", an absolute path
// ("/srv/staging/app") or "ssh://[user@]host[:port]/path". A relative path,
// a ".." component, an empty host, a bad port or user, a password, a query
// and any other scheme are ErrInvalidTarget, saying which.
func ParseTarget(s string) (Target, error) {
	bad := func(format string, args ...any) (Target, error) {
		return Target{}, fmt.Errorf("stage target %q: %s: %w", s, fmt.Sprintf(format, args...), ErrInvalidTarget)
	}
	switch {
	case s == "":
		return bad("empty: %s", targetForms)
	case s == "project":
		return Target{Kind: TargetProject}, nil
	case strings.HasPrefix(s, "/"):
		if problem := pathProblem(s); problem != "" {
			return bad("%s", problem)
		}
		return Target{Kind: TargetPath, Path: path.Clean(s)}, nil
	}
	i := strings.Index(s, "://")
	if i < 0 {
		return bad("a relative path (or an unknown word): %s", targetForms)
	}
	if scheme := strings.ToLower(s[:i]); scheme != "ssh" {
		return bad("unknown scheme %q: %s", scheme, targetForms)
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return bad("not a valid ssh URL: %v", err)
	}
	t := Target{Kind: TargetSSH, Host: u.Hostname(), Port: u.Port(), Path: u.Path}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			return bad("holds a password: ssh targets log in with keys (the config's ssh options)")
		}
		t.User = u.User.Username()
		if t.User == "" {
			return bad("empty user name before '@'")
		}
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return bad("a query or fragment is not part of an ssh target")
	}
	if strings.HasSuffix(u.Host, ":") {
		return bad("empty port after ':'")
	}
	if !strings.HasPrefix(u.Host, "[") && strings.Count(u.Host, ":") > 1 {
		return bad("an IPv6 address must be in brackets: ssh://[::1]/path")
	}
	if err := t.validate(); err != nil {
		return bad("%v", err)
	}
	t.Path = path.Clean(t.Path)
	return t, nil
}

// validate checks a Target's fields, however it was made.
func (t Target) validate() error {
	switch t.Kind {
	case TargetProject:
		if t.User != "" || t.Host != "" || t.Port != "" || t.Path != "" {
			return errors.New("the project target has no host or path")
		}
		return nil
	case TargetPath:
		if t.User != "" || t.Host != "" || t.Port != "" {
			return errors.New("a path target has no user, host or port")
		}
	case TargetSSH:
		if t.Host == "" {
			return errors.New("empty host")
		}
		if problem := nameProblem(t.Host, "host", ":"); problem != "" {
			return errors.New(problem)
		}
		if strings.Contains(t.Host, ":") {
			// Only an IPv6 address has a colon (written in brackets).
			if a, err := netip.ParseAddr(t.Host); err != nil || !a.Is6() {
				return fmt.Errorf("host %q is not an IPv6 address, the only host with a colon", t.Host)
			}
		}
		if t.User != "" {
			if problem := nameProblem(t.User, "user", ""); problem != "" {
				return errors.New(problem)
			}
		}
		if t.Port != "" {
			n, err := strconv.Atoi(t.Port)
			if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != t.Port {
				return fmt.Errorf("bad port %q: want a number from 1 to 65535", t.Port)
			}
		}
		if t.Path == "" {
			return errors.New("no path after the host: ssh://host/absolute/path")
		}
	default:
		return fmt.Errorf("unknown target kind %d", int(t.Kind))
	}
	if problem := pathProblem(t.Path); problem != "" {
		return errors.New(problem)
	}
	return nil
}

// pathProblem says what is wrong with a target path ("" when nothing is).
func pathProblem(p string) string {
	switch {
	case p == "":
		return "empty path"
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("relative path %q: a target path must be absolute", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Sprintf("path %q holds a control character", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Sprintf("path %q has a \"..\" component", p)
		}
	}
	if path.Clean(p) == "/" {
		return "the root directory cannot be a target: the target needs a parent directory to keep its store in"
	}
	return ""
}

// nameProblem checks a user or host name: letters, digits, '.', '_', '-'
// and extra, not starting with '-' (which ssh would read as an option).
func nameProblem(s, what, extra string) string {
	if strings.HasPrefix(s, "-") {
		return fmt.Sprintf("%s %q starts with '-'", what, s)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-"+extra, r))
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:]) // not s[i]: 'é' is two bytes
		return fmt.Sprintf("%s %q holds %q", what, s, r)
	}
	return ""
}

// String writes the target the way ParseTarget reads it.
func (t Target) String() string {
	switch t.Kind {
	case TargetProject:
		return "project"
	case TargetPath:
		return t.Path
	case TargetSSH:
		host := t.Host
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if t.Port != "" {
			host += ":" + t.Port
		}
		u := url.URL{Scheme: "ssh", Host: host, Path: t.Path}
		if t.User != "" {
			u.User = url.User(t.User)
		}
		return u.String()
	}
	return fmt.Sprintf("invalid target (kind %d, path %q)", int(t.Kind), t.Path)
}

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

// Exit statuses of the scripts, read back into errors.
const (
	exitFailed      = 10
	exitNotFound    = 11
	exitExists      = 12
	exitNotBtrfs    = 13
	exitBusy        = 14
	exitNoTool      = 15
	exitCorrupt     = 16
	exitNotVolume   = 17
	exitInterrupted = 18
	exitAborted     = 19
	exitSSH         = 255 // ssh's own failure
)

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
// the shared functions, then body.
func (r *Replica) script(body string, vars ...string) string {
	target, dir, store := r.paths()
	var b strings.Builder
	vars = append([]string{"P", target, "D", dir, "S", store}, vars...)
	for i := 0; i+1 < len(vars); i += 2 {
		fmt.Fprintf(&b, "%s=%s\n", vars[i], shellQuote(vars[i+1]))
	}
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
		cause = ErrReplicaUnreachable
	case res.code == exitNotFound:
		cause = cowfs.ErrNotFound
	case res.code == exitExists:
		cause = cowfs.ErrExists
	case res.code == exitNotBtrfs:
		cause = cowfs.ErrUnsupportedFS
	case res.code == exitBusy:
		cause = ErrReplicaBusy
	case res.code == exitCorrupt:
		cause = cowfs.ErrCorruptStream
	case res.code == exitNotVolume:
		cause = cowfs.ErrNotVolume
	case res.code == exitInterrupted:
		cause = ErrReplicaInterrupted
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

// scriptFunctions are shared by every script (POSIX sh, GNU coreutils,
// util-linux, findutils and btrfs-progs on the replica's host). Messages
// go to standard error; fail exits with one of the exit* statuses.
const scriptFunctions = `trap '' PIPE
LC_ALL=C
export LC_ALL
fail() {
	code=$1
	shift
	printf '%s\n' "$*" >&2
	exit "$code"
}
have() { [ -e "$1" ] || [ -L "$1" ]; }
isvol() { btrfs subvolume show "$1" >/dev/null 2>&1; }
# field KEY PATH prints a field of btrfs subvolume show: UUID, Parent UUID, Flags...
field() {
	btrfs subvolume show "$2" 2>/dev/null | awk -v k="$1:" '{ sub(/^[ \t]+/, "") } index($0, k) == 1 { v = substr($0, length(k) + 1); gsub(/^[ \t]+|[ \t]+$/, "", v); print v; exit }'
}
# rmtree PATH deletes a subvolume or a directory, with the subvolumes in it.
rmtree() {
	have "$1" || return 0
	if isvol "$1" && btrfs subvolume delete "$1" >/dev/null 2>&1; then
		return 0
	fi
	find "$1" -mindepth 1 -depth -type d -inum 256 -exec btrfs subvolume delete {} + >/dev/null 2>&1
	if isvol "$1"; then
		btrfs subvolume delete "$1" >/dev/null
	else
		rm -rf -- "$1"
	fi
}
# setup checks the tools and the target's directory, and makes the store.
setup() {
	for t in btrfs flock find awk stat; do
		command -v "$t" >/dev/null 2>&1 || fail 15 "$t is not installed on the replica's host"
	done
	[ -d "$D" ] || fail 11 "the target's directory $D does not exist"
	fs=$(stat -f -c %T "$D") || fail 10 "cannot read the filesystem type of $D"
	[ "$fs" = btrfs ] || fail 13 "$D is on $fs, not btrfs"
	[ -d "$S" ] || mkdir -m 700 "$S" 2>/dev/null || [ -d "$S" ] || fail 10 "cannot make the store $S"
}
lock() {
	exec 9>>"$S/lock" || fail 10 "cannot open the lock $S/lock"
	flock -w 60 9 || fail 14 "another operation has held $S/lock for over 60s"
}
unlock() { exec 9>&-; }
# target_ok checks that the target is a subvolume that can be renamed.
target_ok() {
	isvol "$P" || fail 17 "the target $P is not a btrfs subvolume"
	if command -v mountpoint >/dev/null 2>&1 && mountpoint -q "$P"; then
		fail 17 "the target $P is a mount point, which cannot be renamed"
	fi
}
# interrupted lists the switches and reverts interrupted between their renames.
interrupted() {
	ops=
	for p in "$S"/prev-*; do
		x=${p##*/prev-}
		if have "$S/next-$x"; then
			ops="$ops, a switch to $x"
		elif have "$S/gone-$x"; then
			ops="$ops, a revert to prev:$x"
		fi
	done
	printf '%s' "${ops#, }"
}
# need_target fails when the target is missing, naming the interrupted operation.
need_target() {
	have "$P" && return 0
	ops=$(interrupted)
	[ -n "$ops" ] || fail 18 "the target $P is missing, and no interrupted switch or revert explains it"
	fail 18 "the target $P is missing after an interrupted operation ($ops): run it again to finish it"
}
# sweep removes what interrupted checks and receives left: those whose lock nobody holds.
sweep() {
	for l in "$S"/check-*.lock "$S"/part-*.lock; do
		have "$l" || continue
		flock -n "$l" true 2>/dev/null || continue
		rmtree "${l%.lock}" && rm -f -- "$l"
	done
}
`

const hasScript = `if [ -d "$S/recv-$N" ]; then echo yes; else echo no; fi
`

// receiveScript receives the stream on its standard input into
// part-NAME~ID, then keeps it as recv-NAME only if the next line of its
// standard input is "commit" and the scriptResult is one read-only received
// subvolume.
const receiveScript = `setup
lock
sweep
have "$S/recv-$N" && fail 12 "$N is received already"
T="$S/part-$N~$ID"
exec 7>"$T.lock" || fail 10 "cannot make $T.lock"
flock -n 7 || fail 10 "cannot lock $T.lock"
mkdir "$T" || fail 10 "cannot make $T"
unlock
trap 'rmtree "$T"; rm -f -- "$T.lock"' EXIT
trap 'exit 143' HUP INT TERM
btrfs receive -q -e "$T" >/dev/null || fail 10 "btrfs receive of $N failed; nothing of it was kept"
IFS= read -r word || word=
[ "$word" = commit ] || fail 19 "the sender did not finish the stream of $N; nothing of it was kept"
n=$(find "$T" -mindepth 1 -maxdepth 1 | wc -l)
sub=$(find "$T" -mindepth 1 -maxdepth 1 | head -n 1)
{ [ "$n" -eq 1 ] && isvol "$sub"; } || fail 16 "the stream of $N made $n entries, not one subvolume"
case $(field Flags "$sub") in
*readonly*) ;;
*) fail 16 "the subvolume received for $N is not read-only: its stream did not end" ;;
esac
case $(field "Received UUID" "$sub") in
'' | -) fail 16 "the subvolume received for $N has no received UUID" ;;
esac
lock
have "$S/recv-$N" && fail 12 "$N is received already"
mv -T -- "$T" "$S/recv-$N" || fail 10 "cannot move $T to $S/recv-$N"
trap - EXIT
rm -f -- "$T.lock"
sync -f "$S" 2>/dev/null || sync
`

// switchScript: P -> prev-NAME, next-NAME -> P, deciding from what it
// finds where an interrupted run of it stopped.
const switchScript = `setup
lock
R="$S/recv-$N"
NX="$S/next-$N"
PV="$S/prev-$N"
GN="$S/gone-$N"
[ -d "$R" ] || fail 11 "$N has not been received (no $R)"
RS=$(find "$R" -mindepth 1 -maxdepth 1 | head -n 1)
{ [ -n "$RS" ] && isvol "$RS"; } || fail 10 "$R holds no subvolume"
RU=$(field UUID "$RS")
[ -n "$RU" ] || fail 10 "cannot read the UUID of $RS"
# next makes next-NAME a writable snapshot of the received one, unless one is there.
next() {
	if have "$NX" && [ "$(field 'Parent UUID' "$NX")" != "$RU" ]; then
		rmtree "$NX" || fail 10 "cannot remove $NX, which is not a snapshot of $RS"
	fi
	have "$NX" || btrfs subvolume snapshot "$RS" "$NX" >/dev/null || fail 10 "cannot snapshot $RS to $NX"
}
if ! have "$P"; then
	if have "$PV" && have "$NX"; then
		: # This switch was interrupted between its renames: finish it below.
	else
		# Missing after another interrupted operation: not ours to finish.
		[ -z "$(interrupted)" ] || need_target
		# The first switch (or the target was removed): an empty target,
		# kept as prev.
		btrfs subvolume create "$P" >/dev/null || fail 10 "cannot create the target subvolume $P"
	fi
fi
if have "$P"; then
	target_ok
	if [ "$(field 'Parent UUID' "$P")" = "$RU" ]; then
		# Switched already.
		rmtree "$NX" || fail 10 "cannot remove $NX"
		if have "$PV"; then echo "prev:$N"; fi
		exit 0
	fi
	have "$PV" && fail 12 "$PV still holds what the target held before an earlier switch to $N: forget prev:$N first"
	next
	mv -T -- "$P" "$PV" || fail 10 "cannot move $P to $PV"
fi
# The target is missing here: prev-NAME holds what it held. What an
# earlier Revert(prev:NAME) took away is of no more use.
rmtree "$GN" || fail 10 "cannot remove $GN"
next
mv -T -- "$NX" "$P" || fail 10 "cannot move $NX to $P"
sync -f "$P" 2>/dev/null || sync
echo "prev:$N"
`

// revertScript: P -> gone-NAME, prev-NAME -> P, deciding from what it
// finds where an interrupted run of it stopped.
const revertScript = `setup
lock
PV="$S/prev-$N"
GN="$S/gone-$N"
if have "$P"; then
	if have "$PV"; then
		target_ok
		rmtree "$GN" || fail 10 "cannot remove $GN"
		mv -T -- "$P" "$GN" || fail 10 "cannot move $P to $GN"
	elif have "$GN"; then
		exit 0 # reverted already
	else
		fail 11 "prev:$N is not kept (no $PV)"
	fi
fi
# The target is missing here: finish this revert, or undo an interrupted
# switch to the same name, or put prev back where nothing explains why the
# target is missing; another interrupted operation is for it to finish.
{ have "$PV" && { have "$GN" || have "$S/next-$N" || [ -z "$(interrupted)" ]; }; } || need_target
mv -T -- "$PV" "$P" || fail 10 "cannot move $PV to $P"
sync -f "$P" 2>/dev/null || sync
`

// checkScript runs CMD in check-ID, a writable snapshot of P, in a session
// of its own. A watcher reads standard input and kills that session when
// it ends (ssh or sandboxd went away); the script kills the watcher once
// the check is over, so the watcher never outlives the check's process
// group. The check's status is the last line on standard error.
const checkScript = `setup
command -v setsid >/dev/null 2>&1 || fail 15 "setsid is not installed on the replica's host"
lock
need_target
C="$S/check-$ID"
exec 7>"$C.lock" || fail 10 "cannot make $C.lock"
flock -n 7 || fail 10 "cannot lock $C.lock"
cpid=
trap 'rmtree "$C" || echo "cannot remove $C" >&2; rm -f -- "$C.lock"' EXIT
trap '[ -z "$cpid" ] || kill -KILL -"$cpid" 2>/dev/null; exit 143' HUP INT TERM
btrfs subvolume snapshot "$P" "$C" >/dev/null || fail 10 "cannot snapshot $P to $C"
unlock
exec 8<&0
(cd "$C" && exec setsid -w sh -c "$CMD") </dev/null 8<&- 7>&- 2>&1 &
cpid=$!
setsid sh -c 'cat >/dev/null; kill -KILL -"$1" 2>/dev/null' watcher "$cpid" <&8 7>&- >/dev/null 2>&1 &
wpid=$!
exec 8<&-
wait "$cpid"
status=$?
kill -KILL -"$wpid" 2>/dev/null
echo "sandboxd-check-status $status" >&2
`

// forgetScript defines forget_recv and forget_prev, which the lines Forget
// appends call.
const forgetScript = `[ -d "$S" ] || exit 0
lock
sweep
if ! have "$P"; then
	for p in "$S"/prev-*; do have "$p" && need_target; done
fi
forget_recv() {
	for x in "$S/recv-$1" "$S/next-$1" "$S/gone-$1" "$S/part-$1~"*; do
		rmtree "$x" || fail 10 "cannot remove $x"
	done
}
forget_prev() {
	for x in "$S/prev-$1" "$S/gone-$1"; do
		rmtree "$x" || fail 10 "cannot remove $x"
	done
}
`
