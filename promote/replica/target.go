package replica

// A stage's target: the project, a path on this host, or a path on
// another host reached by ssh. ParseTarget is the one reading of a target,
// for the config's load and the promotion alike.

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidTarget: a stage target that is not `project`, an absolute
// path or ssh://[user@]host[:port]/path.
var ErrInvalidTarget = errors.New("invalid stage target")

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
