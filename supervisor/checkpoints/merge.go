package checkpoints

// A three-way merge of a conflicting path (issue 33): the project's
// change since the base brought into the sandbox's version by diff3(1)
// (GNU diffutils, on every Debian host), on copies in a private
// directory, bounded in time and size. No merge algorithm of our own.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/tailbuf"
	"github.com/sandboxd/sandboxd/supervisor"
)

// MergeOptions are what Merge does with its result.
type MergeOptions struct {
	// Markers writes the file with conflict markers (<<<<<<< sandbox,
	// =======, >>>>>>> project) around the conflicting hunks; without
	// it a merge that conflicts leaves the file alone.
	Markers bool
	// DryRun writes nothing: Merge says what it would do.
	DryRun bool
}

// LineRange is a hunk's lines in one version: Count lines from line
// Start (1 is the first); Count 0 is a place, after line Start.
type LineRange struct{ Start, Count int }

// Hunk is a conflicting hunk: what each version holds there.
type Hunk struct {
	Sandbox, Base, Project             LineRange
	SandboxText, BaseText, ProjectText string
}

// MergeResult is how a merge went.
type MergeResult struct {
	Clean   bool   // no hunk conflicts
	Written bool   // the sandbox's file was written
	Hunks   []Hunk // the conflicting hunks
	Merged  []byte // the merged text (with markers where it conflicts)
}

// mergeTimeout bounds one run of diff3; its output is bounded by
// mergeOutputMax (the three files are at most MaxVersionBytes each).
const (
	mergeTimeout   = 30 * time.Second
	mergeOutputMax = 4*MaxVersionBytes + 64<<10
)

// diff3Program is GNU diff3, which merges.
var diff3Program = "diff3"

// Merge merges the project's change to path since the sandbox's base
// into the sandbox's version (FileVersions' three, read for the caller
// of ctx; each a text file of at most MaxVersionBytes, the base's
// possibly absent). A clean merge, or with o.Markers any, is given to
// write with the path relative to the project's top (the caller's file
// write into the sandbox, as the caller: its quota and ownership
// apply), unless o.DryRun or the
// sandbox's version already is the result. A merge that conflicts
// otherwise leaves the file alone and lists the hunks.
func (c *Checkpoints) Merge(ctx context.Context, id, path string, o MergeOptions, write func(ctx context.Context, rel string, data []byte) error) (res MergeResult, err error) {
	what := "merging " + strconv.Quote(path) + " in sandbox " + id
	rel, err := cleanRel(path)
	if err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	vs, err := c.FileVersions(ctx, id, rel, MaxVersionBytes)
	if err != nil {
		return res, err
	}
	if rec, gerr := c.h.Store().Get(id); gerr == nil {
		defer func() { c.h.Audit(ctx, "merge", rec, err) }()
	}
	if err := mergeable(vs); err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	texts := [3][]byte{}
	for i, v := range vs {
		texts[i] = v.Data // nil for an absent base: added on both sides
	}
	base, project, sandbox := texts[0], texts[1], texts[2]
	res, err = merge3(ctx, base, project, sandbox)
	if err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	if (res.Clean || o.Markers) && !o.DryRun && !bytes.Equal(res.Merged, sandbox) {
		if err := write(ctx, rel, res.Merged); err != nil {
			return res, fmt.Errorf("%s: writing the merged file: %w", what, err)
		}
		res.Written = true
	}
	c.h.Log().Info("file merged", "SANDBOX_ID", id, "ACTION", "merge", "path", path, "clean", res.Clean,
		"hunks", len(res.Hunks), "written", res.Written, "CALLER_UID", uidField(ctx))
	return res, nil
}

// mergeable says why versions vs (base, project, sandbox) do not merge
// line by line (nil: they do): each a text file of at most
// MaxVersionBytes, but the base, which may be absent (added on both
// sides).
func mergeable(vs []Version) error {
	base, project, sandbox := vs[0], vs[1], vs[2]
	absent := func(v Version) bool { return v.Kind == KindAbsent }
	switch {
	case absent(project) && absent(sandbox):
		return invalidf("neither the project nor the sandbox has it: nothing to merge")
	case absent(base) && absent(project):
		return invalidf("only the sandbox has it (the base and the project have none): nothing to merge")
	case absent(base) && absent(sandbox):
		return invalidf("only the project has it (the base and the sandbox have none): nothing to merge; a rebase brings it")
	}
	for _, v := range vs {
		switch {
		case absent(v) && v.Which == WhichBase:
		case absent(v):
			return invalidf("the %s deleted it: nothing to merge; keep one side (write the file in the sandbox, or delete it)", v.Which)
		case v.Kind != KindFile:
			return invalidf("the %s's version is %s (%s): only regular text files merge", v.Which, v.Kind, v.Note)
		case v.Truncated:
			return invalidf("the %s's version is %d bytes, over %d: too large to merge here", v.Which, v.Size, MaxVersionBytes)
		case v.Binary:
			return invalidf("the %s's version is binary (it holds a NUL byte): diff3 merges lines of text; keep one side", v.Which)
		}
	}
	return nil
}

// merged is conflicts (paths) less those the sandbox resolved: its
// version (in the tree at sandbox) already holds the project's change
// since the base (trees base, project), as a Merge leaves it: diff3
// merges the three cleanly into the sandbox's version itself. The
// sandbox's version then goes onto the project's as any change does.
// The look is bounded: at most maxMergedChecks paths, mergedBudget in
// all; a path not looked at, or whose diff3 failed (too slow, too much
// output), stays a conflict.
func merged(ctx context.Context, conflicts []string, base, project, sandbox string) ([]string, error) {
	budget, cancel := context.WithTimeout(ctx, mergedBudget)
	defer cancel()
	var left []string
	for i, p := range conflicts {
		if i >= maxMergedChecks || budget.Err() != nil {
			left = append(left, p) // not looked at: still a conflict
			continue
		}
		vs := make([]Version, 3)
		for i, tree := range []string{base, project, sandbox} {
			v, err := readVersion(tree, p, supervisor.Daemon("rebase"), MaxVersionBytes)
			if err != nil {
				return nil, fmt.Errorf("reading %s to see whether the sandbox merged it: %w", p, err)
			}
			v.Which = []string{WhichBase, WhichProject, WhichSandbox}[i]
			vs[i] = v
		}
		if mergeable(vs) == nil {
			// The merged text alone: the hunks are not asked for.
			res, err := runMerge(budget, vs[0].Data, vs[1].Data, vs[2].Data, false)
			if err == nil && res.Clean && bytes.Equal(res.Merged, vs[2].Data) {
				continue
			}
		}
		left = append(left, p)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return left, nil
}

// maxMergedChecks bounds the conflicting paths a rebase reads and runs
// diff3 on to see whether the sandbox merged them (a sandbox that
// conflicts on thousands of paths has not merged them one by one);
// mergedBudget bounds the time it spends on them (a diff3 of two files
// of MaxVersionBytes with nothing in common takes 20 s of a core).
const maxMergedChecks = 100

var mergedBudget = 30 * time.Second

// merge3 runs diff3 on copies of the three texts in a private temporary
// directory: `diff3 -m -E` for the merged text (exit 1: it conflicts),
// and, when it conflicts, plain diff3 for the hunks' lines.
func merge3(ctx context.Context, base, project, sandbox []byte) (res MergeResult, err error) {
	return runMerge(ctx, base, project, sandbox, true)
}

// runMerge is merge3, with the hunks of a merge that conflicts only if
// hunks.
func runMerge(ctx context.Context, base, project, sandbox []byte, hunks bool) (res MergeResult, err error) {
	dir, err := os.MkdirTemp("", "sandboxd-merge-")
	if err != nil {
		return res, fmt.Errorf("a directory for the merge: %w", err)
	}
	defer os.RemoveAll(dir)
	names := []string{"sandbox", "base", "project"} // diff3's MINE OLDER YOURS
	for i, data := range [][]byte{sandbox, base, project} {
		if err := os.WriteFile(filepath.Join(dir, names[i]), data, 0o600); err != nil {
			return res, fmt.Errorf("copying the %s's version for the merge: %w", names[i], err)
		}
	}
	merged, code, err := runDiff3(ctx, dir, "-m", "-E", "-L", "sandbox", "-L", "base", "-L", "project", "--", "sandbox", "base", "project")
	if err != nil {
		return res, err
	}
	res.Merged, res.Clean = merged, code == 0
	if res.Clean || !hunks {
		return res, nil
	}
	out, _, err := runDiff3(ctx, dir, "--", "sandbox", "base", "project")
	if err != nil {
		return res, err
	}
	if res.Hunks, err = parseHunks(out); err != nil {
		return res, err
	}
	return res, nil
}

// runDiff3 runs diff3 with args in dir, bounded in time and output: its
// output, and its exit status 0 (merged) or 1 (conflicts).
func runDiff3(ctx context.Context, dir string, args ...string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, mergeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, diff3Program, args...)
	cmd.Dir = dir
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	// diff3 runs diff(1) twice: in a process group of their own, all
	// are killed when the time is up or the output over its bound (diff3
	// alone killed, its diff would compute on as root).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := &capped{max: mergeOutputMax, stop: cancel}
	stderr := &tailbuf.Buffer{Max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case out.over:
		return nil, 0, fmt.Errorf("diff3's output is over %d bytes: %w", mergeOutputMax, supervisor.ErrInvalid)
	case ctx.Err() != nil:
		return nil, 0, fmt.Errorf("diff3 took over %s: %w", mergeTimeout, ctx.Err())
	case err == nil:
		return out.b.Bytes(), 0, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return out.b.Bytes(), 1, nil
	}
	return nil, 0, fmt.Errorf("diff3 %s: %s: %w", strings.Join(args, " "), strings.TrimSpace(stderr.String()), err)
}

// capped keeps what is written up to max bytes, and says it was over
// (and calls stop).
type capped struct {
	b    bytes.Buffer
	max  int
	over bool
	stop func()
}

func (c *capped) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		c.over = true
		if c.stop != nil {
			c.stop()
		}
		return 0, errors.New("output over its bound")
	}
	return c.b.Write(p)
}

// rangeLine is a line of diff3's plain output naming a version's lines:
// "1:10c", "2:3,5c", "3:7a".
var rangeLine = regexp.MustCompile(`^([123]):([0-9]+)(?:,([0-9]+))?([ac])$`)

// parseHunks reads diff3's plain output (MINE = sandbox, OLDER = base,
// YOURS = project) for its conflicting hunks, those under "====" (the
// three versions all differ); "====N" hunks, where one version alone
// differs, merge.
func parseHunks(out []byte) ([]Hunk, error) {
	var hunks []Hunk
	var h *Hunk
	// In a "====" hunk each version's lines follow its own range line
	// (an "a" range has none): text is of the last range named.
	current := -1
	var texts [3]strings.Builder
	flush := func() {
		if h != nil {
			h.SandboxText, h.BaseText, h.ProjectText = texts[0].String(), texts[1].String(), texts[2].String()
			hunks = append(hunks, *h)
		}
		h, current = nil, -1
		for i := range texts {
			texts[i].Reset()
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), mergeOutputMax)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "===="):
			flush()
			if line == "====" {
				h = &Hunk{}
			}
		case h == nil:
			// A hunk that merges.
		case strings.HasPrefix(line, "  "):
			if current >= 0 {
				texts[current].WriteString(line[2:] + "\n")
			}
		case strings.HasPrefix(line, `\`):
			// "\ No newline at end of file": the last line had none.
			if current >= 0 {
				t := strings.TrimSuffix(texts[current].String(), "\n")
				texts[current].Reset()
				texts[current].WriteString(t)
			}
		default:
			m := rangeLine.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("reading diff3's hunks: an unexpected line %q", line)
			}
			start, _ := strconv.Atoi(m[2])
			r := LineRange{Start: start, Count: 1}
			if m[3] != "" {
				end, _ := strconv.Atoi(m[3])
				r.Count = end - start + 1
			}
			if m[4] == "a" {
				r.Count = 0
			}
			// diff3's order is MINE, OLDER, YOURS.
			current = int(m[1][0] - '1')
			*[]*LineRange{&h.Sandbox, &h.Base, &h.Project}[current] = r
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading diff3's hunks: %w", err)
	}
	flush()
	return hunks, nil
}
