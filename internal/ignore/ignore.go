// Package ignore matches paths against rules in gitignore syntax: what a
// project says never leaves a sandbox (its .sandboxignore, the config's
// [[project]] ignore), and its .gitignore where the defaults ask it.
//
// It is pure logic, bounded: Parse takes at most MaxRulesBytes of text
// and MaxRules patterns of MaxSegments segments; matching is the classic
// greedy wildcard match (per segment, and over segments for `**`), never
// exponential, and a Project stops at MaxWork steps for a whole change
// list (ErrTooComplex) whatever its patterns and paths hold. A pattern
// with one `**` (the usual "**/x", "a/**", "a/**/b") costs its length.
//
// The subset is git's documented one (gitignore(5)): blank lines and
// `#` comments; `!` negation; a trailing `/` for directories only; a `/`
// at the start or in the middle anchoring the pattern to the top, none
// matching the name at any depth; `*`, `?` and `[...]` (ranges, `!`/`^`
// negation, POSIX classes such as [:digit:]) within a segment; `**` as a
// leading `**/`, a middle `/**/` or a trailing `/**`; backslash escapes
// and trailing spaces dropped unless escaped. A path under an ignored
// directory is ignored, and no negation brings it back (as git).
//
// No new dependency: none of the module's libraries (toml, go-systemd,
// btrfs, dbus, go-zfs, the MCP SDK, urfave/cli, bbolt, x/sys) has a
// gitignore matcher, and path.Match has neither `**` nor directory rules.
package ignore

import (
	"errors"
	"fmt"
	"strings"
)

// MaxRulesBytes bounds the text Parse takes: a rules file of a sandbox's
// project is read by the root daemon, and past this it is refused, not cut.
const MaxRulesBytes = 256 << 10

// MaxPathBytes bounds a path Match takes (longer is never ignored):
// Linux's PATH_MAX, so no real path is past it.
const MaxPathBytes = 4096

// MaxSegments bounds a pattern's `/`-separated segments, and MaxRules
// the patterns of one Rules: matching costs up to their product times a
// path's depth.
const (
	MaxSegments = 64
	MaxRules    = 4096
)

// MaxWork bounds the steps (a character or a segment tried) spent on one
// change list (a Project) or one Rules.Match: an owner's rules full of
// `*` and `**` against a sandbox's deepest paths could otherwise take
// minutes of the root daemon's time. Past it, ErrTooComplex.
const MaxWork = 20_000_000

// ErrTooComplex is rules whose matching took more than MaxWork steps.
var ErrTooComplex = errors.New("ignore rules too costly to match")

// work is what is left of a MaxWork budget.
type work struct{ left int64 }

func newWork() *work { return &work{left: MaxWork} }

// spend takes n steps; false once the budget is gone.
func (w *work) spend(n int) bool {
	w.left -= int64(n)
	return w.left >= 0
}

// ErrSyntax is a pattern that cannot mean anything: an unterminated
// `[...]` or a trailing backslash.
var ErrSyntax = errors.New("invalid ignore pattern")

// ErrTooLarge is rules text past MaxRulesBytes.
var ErrTooLarge = errors.New("ignore rules too large")

// Rules is an ordered list of patterns; the last that matches a path
// decides (a `!` one keeps it).
type Rules struct {
	rules []rule
}

type rule struct {
	text     string // as written, for errors and String
	negate   bool
	dirOnly  bool
	anchored bool     // a `/` at the start or in the middle: matched from the top
	segs     []string // the pattern's segments; "**" is any number of them
	stars    int      // how many of segs are "**"
	star     int      // the index of the first
}

// Parse reads rules text, one pattern a line (gitignore(5)). A line that
// is invalid is an error naming it (line n: pattern), wrapping ErrSyntax;
// text over MaxRulesBytes wraps ErrTooLarge.
func Parse(text string) (*Rules, error) {
	if len(text) > MaxRulesBytes {
		return nil, fmt.Errorf("%d bytes, over the %d an ignore file may have: %w", len(text), MaxRulesBytes, ErrTooLarge)
	}
	r := &Rules{}
	for i, line := range strings.Split(text, "\n") {
		ru, ok, err := parseLine(strings.TrimSuffix(line, "\r"))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if ok {
			r.rules = append(r.rules, ru)
		}
	}
	if len(r.rules) > MaxRules {
		return nil, fmt.Errorf("%d patterns, over the %d an ignore file may have: %w", len(r.rules), MaxRules, ErrTooLarge)
	}
	return r, nil
}

// ParseLenient is Parse where an invalid line is dropped (it matches
// nothing), as git does with a .gitignore: for a file that is the
// project's own, not written for us.
func ParseLenient(text string) (*Rules, error) {
	if len(text) > MaxRulesBytes {
		return nil, fmt.Errorf("%d bytes, over the %d an ignore file may have: %w", len(text), MaxRulesBytes, ErrTooLarge)
	}
	r := &Rules{}
	for _, line := range strings.Split(text, "\n") {
		if ru, ok, err := parseLine(strings.TrimSuffix(line, "\r")); err == nil && ok {
			r.rules = append(r.rules, ru)
		}
	}
	if len(r.rules) > MaxRules {
		return nil, fmt.Errorf("%d patterns, over the %d an ignore file may have: %w", len(r.rules), MaxRules, ErrTooLarge)
	}
	return r, nil
}

// Patterns parses a list of patterns (the config's), each one line; an
// invalid one is an error naming it.
func Patterns(patterns []string) (*Rules, error) {
	r := &Rules{}
	for _, p := range patterns {
		if strings.ContainsAny(p, "\n\r") {
			return nil, fmt.Errorf("pattern %q holds a line break: %w", p, ErrSyntax)
		}
		ru, ok, err := parseLine(p)
		if err != nil {
			return nil, err
		}
		if ok {
			r.rules = append(r.rules, ru)
		}
	}
	return r, nil
}

// Concat is a's rules then b's (b's decide where both match); nil is none.
func Concat(rs ...*Rules) *Rules {
	out := &Rules{}
	for _, r := range rs {
		if r != nil {
			out.rules = append(out.rules, r.rules...)
		}
	}
	return out
}

// Len is how many patterns r holds (comments and blank lines not counted).
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return len(r.rules)
}

func parseLine(line string) (rule, bool, error) {
	if line == "" || line[0] == '#' {
		return rule{}, false, nil
	}
	text := line
	line = trimTrailingSpaces(line)
	if line == "" {
		return rule{}, false, nil
	}
	var ru rule
	ru.text = text
	if line[0] == '!' {
		ru.negate = true
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") && !escapedAt(line, len(line)-1) {
		ru.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return rule{}, false, nil
	}
	segs := splitUnescaped(line)
	if segs[0] == "" { // a leading slash
		ru.anchored = true
		segs = segs[1:]
	}
	if len(segs) > 1 {
		ru.anchored = true
	}
	for _, s := range segs {
		if s == "" {
			continue // a//b is a/b, as git's path matching has it
		}
		if err := checkSegment(s); err != nil {
			return rule{}, false, fmt.Errorf("pattern %q: %w", text, err)
		}
		// `**` next to anything else in its segment is two `*` (gitignore(5)).
		if s == "**" && len(ru.segs) > 0 && ru.segs[len(ru.segs)-1] == "**" {
			continue
		}
		ru.segs = append(ru.segs, s)
	}
	if len(ru.segs) == 0 {
		return rule{}, false, nil
	}
	if len(ru.segs) > MaxSegments {
		return rule{}, false, fmt.Errorf("pattern %q has %d segments: at most %d: %w", text, len(ru.segs), MaxSegments, ErrSyntax)
	}
	ru.star = -1
	for i, seg := range ru.segs {
		if seg == "**" {
			if ru.stars++; ru.star < 0 {
				ru.star = i
			}
		}
	}
	return ru, true, nil
}

// trimTrailingSpaces drops trailing spaces not quoted with a backslash.
func trimTrailingSpaces(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' && !escapedAt(s, len(s)-1) {
		s = s[:len(s)-1]
	}
	return s
}

// escapedAt says whether s[i] follows an odd run of backslashes.
func escapedAt(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// splitUnescaped splits s at each `/` not after a backslash.
func splitUnescaped(s string) []string {
	var segs []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '/':
			segs = append(segs, s[start:i])
			start = i + 1
		}
	}
	return append(segs, s[start:])
}

// checkSegment refuses what cannot match: a trailing lone backslash or
// an unterminated bracket expression.
func checkSegment(s string) error {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return fmt.Errorf("a trailing backslash escapes nothing: %w", ErrSyntax)
			}
			i++
		case '[':
			end, ok := classEnd(s, i)
			if !ok {
				return fmt.Errorf("a '[' without its ']' (or an unknown [:class:]): %w", ErrSyntax)
			}
			i = end
		}
	}
	return nil
}

// Match says whether path (relative to the project's top, `/`-separated,
// no leading slash) is ignored; dir says it is a directory. A path under
// an ignored directory is ignored.
func (r *Rules) Match(path string, dir bool) bool {
	return r.match(path, dir, nil, newWork())
}

// match is Match, with the decisions on directories kept in memo (if not
// nil): a change list names each directory of a deep tree many times.
func (r *Rules) match(path string, dir bool, memo map[string]bool, w *work) bool {
	if r == nil || len(r.rules) == 0 || len(path) > MaxPathBytes {
		return false
	}
	path = strings.Trim(path, "/")
	if path == "" || path == "." {
		return false // the project's top is never left out
	}
	comps := strings.Split(path, "/")
	end := 0
	for i := 1; i < len(comps); i++ {
		end += len(comps[i-1]) + 1
		parent := path[:end-1]
		ignored, seen := memo[parent]
		if !seen {
			ignored = r.decide(comps[:i], true, w)
			if memo != nil {
				memo[parent] = ignored
			}
		}
		if ignored {
			// An ignored directory: nothing beneath comes back. Its
			// children inherit the mark, so later lookups stop here.
			if memo != nil {
				for j := i + 1; j < len(comps); j++ {
					memo[strings.Join(comps[:j], "/")] = true
				}
			}
			return true
		}
	}
	return r.decide(comps, dir, w)
}

// decide applies the rules to one path, the last matching rule winning.
func (r *Rules) decide(comps []string, dir bool, w *work) bool {
	for i := len(r.rules) - 1; i >= 0; i-- {
		ru := &r.rules[i]
		if ru.dirOnly && !dir {
			continue
		}
		if ru.matches(comps, w) {
			return !ru.negate
		}
	}
	return false
}

func (ru *rule) matches(comps []string, w *work) bool {
	switch {
	case !ru.anchored:
		return matchSegment(ru.segs[0], comps[len(comps)-1], w)
	case ru.stars == 0:
		return len(comps) == len(ru.segs) && matchEach(ru.segs, comps, w)
	case ru.stars == 1:
		// One "**" (the common "**/x", "a/**", "a/**/b"): what is before
		// it matches the first segments, what is after the last ones.
		i := ru.star
		before, after := ru.segs[:i], ru.segs[i+1:]
		least := len(before) + len(after)
		if i == len(ru.segs)-1 {
			least++ // a trailing "**" is at least one segment
		}
		return len(comps) >= least && matchEach(before, comps[:len(before)], w) && matchEach(after, comps[len(comps)-len(after):], w)
	}
	return matchSegments(ru.segs, comps, w)
}

// matchEach matches segments one to one.
func matchEach(pat, comps []string, w *work) bool {
	for i := range pat {
		if !matchSegment(pat[i], comps[i], w) {
			return false
		}
	}
	return true
}

// matchSegments is the greedy wildcard match over segments: "**" is any
// run of segments, a trailing one at least one (git's "abc/**" matches
// what is inside abc, not abc), any other segment a glob of one name.
func matchSegments(pat, comps []string, w *work) bool {
	if n := len(pat); n > 0 && pat[n-1] == "**" {
		// At least one segment for it: the rest, then any run, match
		// all but the last segment.
		if len(comps) == 0 {
			return false
		}
		return greedySegments(pat, comps[:len(comps)-1], w)
	}
	return greedySegments(pat, comps, w)
}

// greedySegments is the classic one-star-remembered wildcard match with
// "**" as the star: linear in each times the other, never exponential.
func greedySegments(pat, comps []string, w *work) bool {
	p, c := 0, 0
	star, mark := -1, 0
	for c < len(comps) {
		if !w.spend(1) {
			return false // the caller sees ErrTooComplex
		}
		switch {
		case p < len(pat) && pat[p] == "**":
			star, mark = p, c
			p++
		case p < len(pat) && matchSegment(pat[p], comps[c], w):
			p++
			c++
		case star >= 0:
			p = star + 1
			mark++
			c = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == "**" {
		p++
	}
	return p == len(pat)
}

// Defaults are what a project leaves out where its .gitignore ignores it
// too: Python's bytecode and a Node project's cache.
var Defaults = mustPatterns("__pycache__/", "*.pyc", "node_modules/.cache/")

func mustPatterns(p ...string) *Rules {
	r, err := Patterns(p)
	if err != nil {
		panic(err)
	}
	return r
}

// Project is what a project leaves out: its own rules (the config's and
// its .sandboxignore, in that order), and each of Defaults where its
// .gitignore ignores the path too. It keeps its decisions on
// directories: make one per change list.
type Project struct {
	own, git         *Rules
	ownMemo, gitMemo map[string]bool
	defMemo          map[string]bool
	work             *work
}

// NewProject is the rules of a project: own (nil: none) and its
// .gitignore's (nil: it has none, and no default applies).
func NewProject(own, git *Rules) *Project {
	return &Project{own: own, git: git, ownMemo: map[string]bool{}, gitMemo: map[string]bool{}, defMemo: map[string]bool{}, work: newWork()}
}

// Match says whether path is left out (see Rules.Match).
func (p *Project) Match(path string, dir bool) bool {
	if p.own.match(path, dir, p.ownMemo, p.work) {
		return true
	}
	if p.git.Len() == 0 {
		return false
	}
	return Defaults.match(path, dir, p.defMemo, p.work) && p.git.match(path, dir, p.gitMemo, p.work)
}

// Err is ErrTooComplex once p's matching has spent MaxWork steps: its
// answers since are not to be trusted, and the change list is refused.
func (p *Project) Err() error {
	if p.work.left < 0 {
		return fmt.Errorf("they took over %d steps for one change list; use fewer patterns with more than one \"**\": %w", MaxWork, ErrTooComplex)
	}
	return nil
}

// Empty says p leaves nothing out, whatever the path.
func (p *Project) Empty() bool { return p.own.Len() == 0 && p.git.Len() == 0 }
