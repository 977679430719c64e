// Package changeset says what of a sandbox's changes leave it: the
// backend's change list less the top directory's own metadata, and less
// what the project's ignore rules leave out.
package changeset

// What never leaves a sandbox: the project's ignore rules (the config's
// [[project]] ignore, its .sandboxignore, and the defaults where its
// .gitignore agrees), applied to the change lists of a diff, a try and a
// promotion.
//
// The rules are read from the sandbox's base, the project as it was when
// the sandbox was made (the host's side), never from the sandbox's copy:
// otherwise a sandbox could write a .sandboxignore that hides its own
// other changes from whoever reviews or promotes them. A change to
// .sandboxignore in the sandbox is a change like any other, shown and
// promoted. The base is a read-only snapshot, so a diff, the promotion
// and its resumption after an approval all filter the same way (the
// recorded digest holds).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/ignore"
)

// The project's own rule files, at the top of its volume.
const (
	sandboxIgnoreFile = ".sandboxignore"
	gitIgnoreFile     = ".gitignore"
)

// projectIgnore reads the rules of project from base (a read-only
// snapshot of it): its configured patterns, then its .sandboxignore (a
// bad pattern in either is an error naming it), and its .gitignore for
// the defaults (read as git reads it: a bad line matches nothing).
func projectRules(ctx context.Context, log *slog.Logger, patterns []string, project string, base cowfs.Volume) (*ignore.Project, error) {
	conf, err := ignore.Patterns(patterns)
	if err != nil {
		return nil, fmt.Errorf("project %s's ignore in the configuration: %w", project, err)
	}
	own, found, err := readRulesFile(ctx, base.Path, sandboxIgnoreFile)
	if err != nil {
		return nil, err
	}
	var ownRules *ignore.Rules
	if found {
		if ownRules, err = ignore.Parse(own); err != nil {
			return nil, fmt.Errorf("the project's %s: %w; fix it in the project (gitignore syntax)", sandboxIgnoreFile, err)
		}
	}
	var gitRules *ignore.Rules
	git, found, err := readRulesFile(ctx, base.Path, gitIgnoreFile)
	switch {
	case err != nil && errors.Is(err, ignore.ErrTooLarge):
		return nil, err
	case err != nil:
		// Not a plain file (a symlink, which git does not follow for
		// .gitignore either, a FIFO, a hard link): no defaults, as if none.
		log.Warn("the project's .gitignore is not read", "project", project, "error", err)
	case found:
		if gitRules, err = ignore.ParseLenient(git); err != nil {
			return nil, fmt.Errorf("the project's %s: %w", gitIgnoreFile, err)
		}
	}
	return ignore.NewProject(ignore.Concat(conf, ownRules), gitRules), nil
}

// readRulesFile reads name at the top of the tree at root, beneath it
// and through no symlink (openat2's RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
// as a plain file with one link of at most ignore.MaxRulesBytes: the
// daemon is root, and whoever owns the project wrote the file. found is
// false where there is none.
func readRulesFile(ctx context.Context, root, name string) (text string, found bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", false, fmt.Errorf("opening the project's snapshot %s: %w", root, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return "", false, nil
	case errors.Is(err, unix.ELOOP):
		return "", false, fmt.Errorf("the project's %s is a symlink: make it a plain file", name)
	case err != nil:
		return "", false, fmt.Errorf("opening the project's %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", false, fmt.Errorf("reading the project's %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false, fmt.Errorf("the project's %s is not a plain file: make it one", name)
	}
	if st.Nlink != 1 {
		return "", false, fmt.Errorf("the project's %s has %d hard links: make it a file of its own", name, st.Nlink)
	}
	if st.Size > ignore.MaxRulesBytes {
		return "", false, fmt.Errorf("the project's %s is %d bytes, over the %d it may have; shorten it: %w", name, st.Size, ignore.MaxRulesBytes, ignore.ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, ignore.MaxRulesBytes+1))
	if err != nil {
		return "", false, fmt.Errorf("reading the project's %s: %w", name, err)
	}
	if len(b) > ignore.MaxRulesBytes {
		return "", false, fmt.Errorf("the project's %s is over the %d bytes it may have; shorten it: %w", name, ignore.MaxRulesBytes, ignore.ErrTooLarge)
	}
	return string(b), true, nil
}

// leaveOut drops from changes what rules leave out, and says how many.
// A rename goes only if both its names are left out. A deletion under a
// directory whose deletion stays, stays too: the directory cannot go
// while its ignored entries are there.
func leaveOut(rules *ignore.Project, changes []cowfs.Change) ([]cowfs.Change, int) {
	if rules == nil || rules.Empty() || len(changes) == 0 {
		return changes, 0
	}
	out := make([]cowfs.Change, 0, len(changes))
	ignored := make([]bool, len(changes))
	deletedDirs := map[string]bool{} // deletions of directories that stay
	n := 0
	for i, c := range changes {
		dir := c.Type == cowfs.TypeDir
		ignored[i] = rules.Match(c.Path, dir) && (c.Kind != cowfs.Renamed || rules.Match(c.NewPath, dir))
		if !ignored[i] && c.Kind == cowfs.Deleted && dir {
			deletedDirs[c.Path] = true
		}
	}
	for i, c := range changes {
		if ignored[i] && c.Kind == cowfs.Deleted && underAny(c.Path, deletedDirs) {
			ignored[i] = false
		}
		if ignored[i] {
			n++
			continue
		}
		out = append(out, c)
	}
	return out, n
}

// underAny says whether a directory above p is in dirs.
func underAny(p string, dirs map[string]bool) bool {
	for {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
		if dirs[p] {
			return true
		}
	}
}

// Filter reads project's rules (patterns: its [[project]] ignore in the
// configuration, checked when it was read) from base and applies them to
// the changes from base to now (a read-only snapshot of the sandbox), a
// renamed directory's tree included (openRenames); it returns what is
// kept and how many were left out.
func Filter(ctx context.Context, log *slog.Logger, patterns []string, project string, base, now cowfs.Volume, changes []cowfs.Change) ([]cowfs.Change, int, error) {
	if len(changes) == 0 {
		return changes, 0, nil
	}
	rules, err := projectRules(ctx, log, patterns, project, base)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the project's ignore rules: %w", err)
	}
	changes, err = openRenames(ctx, rules, now.Path, changes)
	if err != nil {
		return nil, 0, fmt.Errorf("reading a renamed directory for what the project's ignore rules leave out: %w", err)
	}
	kept, n := leaveOut(rules, changes)
	if err := rules.Err(); err != nil {
		return nil, 0, fmt.Errorf("the project's ignore rules (.sandboxignore, [[project]] ignore): %w", err)
	}
	return kept, n, nil
}

// Of lists what a sandbox changed in its copy since base (now: a
// read-only snapshot of it): the backend's list, without the top
// directory's own metadata (set by the daemon as the sandbox is made, or
// the sandbox's own chmod of it), which is the host's and never
// promoted. A change inside the top directory is listed as ever.
func Of(ctx context.Context, b cowfs.Backend, base, now cowfs.Volume) ([]cowfs.Change, error) {
	changes, err := b.Changes(ctx, base, now)
	if err != nil {
		return nil, err
	}
	out := changes[:0]
	for _, c := range changes {
		if c.Path == "." && c.Kind == cowfs.Metadata {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}
