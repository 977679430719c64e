package units

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/rootonly"
)

// Bounds on what ServiceEnvironment reads as root on an admin's word.
const (
	// MaxEnvFileSize bounds one file that EnvironmentFile= names; a
	// larger one is refused, not cut.
	MaxEnvFileSize = 1 << 20
	// maxEnvFiles bounds the files one service's EnvironmentFile=
	// settings (their globs expanded) make it read.
	maxEnvFiles = 32
)

// ServiceEnvironment is the environment that service name's processes get
// from the unit's own settings, as systemd builds it when it starts one
// (exec_context_load_environment and build_environment in systemd's
// src/core/execute.c): its Environment= assignments, then the files of
// its EnvironmentFile= settings, read now, in order, later assignments
// replacing earlier ones; then UnsetEnvironment= removes what it names.
// What systemd adds of its own (INVOCATION_ID, $USER of User=, the
// manager's environment, PassEnvironment=) is not part of it.
//
// The files are read by this process (root, in the daemon), as systemd
// reads them: a file of a "-" setting that is missing or cannot be read
// is skipped; without "-", it is an error naming the unit and the file. A
// file must be a regular one (no device, fifo or socket is opened) of at
// most MaxEnvFileSize bytes. Assignments whose name is not a valid one
// are dropped, as systemd drops them.
//
// A unit that is not loaded because it does not exist is ErrNotFound.
func (m *Manager) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	const op = "reading the environment of"
	if err := CheckServiceName(name); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	// Asking about a unit loads it: one that does not exist reads as
	// "not-found", with empty settings, rather than as an error.
	load, err := m.conn.GetUnitPropertyContext(ctx, name, "LoadState")
	if err != nil {
		return nil, wrap(op, name, err)
	}
	switch s, _ := load.Value.Value().(string); s {
	case "loaded":
	case "not-found":
		return nil, fmt.Errorf("%s %s: %w", op, name, ErrNotFound)
	default:
		return nil, fmt.Errorf("%s %s: its load state is %q: systemd does not run it as it is", op, name, s)
	}
	props, err := m.conn.GetUnitTypePropertiesContext(ctx, name, "Service")
	if err != nil {
		return nil, wrap(op, name, err)
	}
	settings, err := serviceSettings(props)
	if err == nil {
		var env []string
		// systemd 254 changed how a comment that ends in a backslash reads.
		old := m.caps.SystemdVersion > 0 && m.caps.SystemdVersion < 254
		env, err = settings.environment(readEnvFile, old)
		if err == nil {
			return env, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %w", op, name, err)
}

// CheckServiceName says whether name is the name of a service unit this
// package reads: a plain unit name ending in ".service" (letters, digits,
// ":", "_", ".", "-" and systemd's "\x2d" escapes), or an instance of a
// template ("postgresql@15-main.service"), not a template itself. The
// error wraps ErrInvalidName.
func CheckServiceName(name string) error {
	prefix, ok := strings.CutSuffix(name, ".service")
	switch {
	case !ok:
		return fmt.Errorf("%w: %q does not end in \".service\"", ErrInvalidName, name)
	case len(name) > maxUnitName:
		return fmt.Errorf("%w: %q is %d bytes long; systemd allows %d", ErrInvalidName, name, len(name), maxUnitName)
	}
	template, instance, isInstance := strings.Cut(prefix, "@")
	switch {
	case template == "":
		return fmt.Errorf("%w: %q has no name before \".service\" or \"@\"", ErrInvalidName, name)
	case isInstance && instance == "":
		return fmt.Errorf("%w: %q is a template: name an instance of it, like %q", ErrInvalidName, name, template+"@instance.service")
	}
	for _, c := range template + instance {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(":_.-\\", c)) {
			return fmt.Errorf("%w: %q holds %q; a unit name holds only letters, digits, \":\", \"_\", \".\", \"-\", \"\\\" and one \"@\"", ErrInvalidName, name, c)
		}
	}
	return nil
}

// envFile is one EnvironmentFile= setting.
type envFile struct {
	Path string // absolute, maybe a glob
	// Ignore: the setting began with "-": a file that is missing or
	// cannot be read is skipped.
	Ignore bool
}

// settings are a service's environment settings, as its properties have
// them.
type settings struct {
	Env, Unset []string
	Files      []envFile
}

// serviceSettings reads Environment (as), EnvironmentFiles (a(sb)) and
// UnsetEnvironment (as, systemd 235 and later) from the properties of a
// service.
func serviceSettings(props map[string]any) (settings, error) {
	var s settings
	var ok bool
	if s.Env, ok = props["Environment"].([]string); !ok && props["Environment"] != nil {
		return s, fmt.Errorf("its property Environment is %T, not an array of strings", props["Environment"])
	}
	if s.Unset, ok = props["UnsetEnvironment"].([]string); !ok && props["UnsetEnvironment"] != nil {
		return s, fmt.Errorf("its property UnsetEnvironment is %T, not an array of strings", props["UnsetEnvironment"])
	}
	files, ok := props["EnvironmentFiles"].([][]any)
	if !ok && props["EnvironmentFiles"] != nil {
		return s, fmt.Errorf("its property EnvironmentFiles is %T, not a(sb)", props["EnvironmentFiles"])
	}
	for _, f := range files {
		var path string
		var ignore, ok1, ok2 bool
		if len(f) == 2 {
			path, ok1 = f[0].(string)
			ignore, ok2 = f[1].(bool)
		}
		if !ok1 || !ok2 {
			return s, fmt.Errorf("its property EnvironmentFiles holds %v, not a (path, ignore) pair", f)
		}
		s.Files = append(s.Files, envFile{Path: path, Ignore: ignore})
	}
	return s, nil
}

// environment applies s in systemd's order, reading files with read and
// parsing them as parseEnvFile does with commentsContinue.
func (s settings) environment(read func(string) ([]byte, error), commentsContinue bool) ([]string, error) {
	var env []string
	for _, kv := range s.Env {
		env = setEnv(env, kv)
	}
	n := 0
	for _, f := range s.Files {
		paths, err := expandEnvFile(f.Path)
		if err != nil {
			if f.Ignore {
				continue
			}
			return nil, fmt.Errorf("EnvironmentFile=%s: %w", f.Path, err)
		}
		for _, p := range paths {
			if n++; n > maxEnvFiles {
				return nil, fmt.Errorf("EnvironmentFile=%s: more than %d files to read", f.Path, maxEnvFiles)
			}
			data, err := read(p)
			var assignments []string
			if err == nil {
				assignments, err = parseEnvFile(data, commentsContinue)
			}
			if err != nil {
				if f.Ignore {
					continue
				}
				return nil, fmt.Errorf("EnvironmentFile=%s: %w", p, err)
			}
			for _, kv := range assignments {
				if validAssignment(kv) {
					env = setEnv(env, kv)
				}
			}
		}
	}
	return unsetEnv(env, s.Unset), nil
}

// expandEnvFile is the files a setting names: the path itself, or what its
// glob matches, sorted, as glob(3) without flags has it: a "*" or "?" does
// not match a name's leading ".". A pattern that matches nothing is
// fs.ErrNotExist, as systemd has it.
func expandEnvFile(pattern string) ([]string, error) {
	if !filepath.IsAbs(pattern) {
		return nil, errors.New("not an absolute path")
	}
	if !strings.ContainsAny(pattern, `*?[\`) {
		return []string{pattern}, nil
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(pattern, "/")
	matches = slices.DeleteFunc(matches, func(m string) bool {
		for i, name := range strings.Split(m, "/") {
			if i < len(parts) && strings.HasPrefix(name, ".") && !strings.HasPrefix(parts[i], ".") {
				return true
			}
		}
		return false
	})
	if len(matches) == 0 {
		return nil, &fs.PathError{Op: "glob", Path: pattern, Err: fs.ErrNotExist}
	}
	return matches, nil
}

// readEnvFile reads path, following symlinks as systemd does, only if it
// is a regular file of at most MaxEnvFileSize bytes. It is looked at
// through an O_PATH descriptor first, so that nothing else (a device, a
// fifo) is ever opened for reading.
func readEnvFile(path string) ([]byte, error) {
	// Read as root and given to the project's users: a file another user
	// could put there (a symlink to a root-only file, in a directory of
	// theirs) is refused.
	if err := rootonly.Check(filepath.Clean(path)); err != nil {
		return nil, fmt.Errorf("%w: an environment file sandboxd reads must be one only root can change, up to /", err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size > MaxEnvFileSize {
		return nil, fmt.Errorf("%s is %d bytes: more than the %d read of an environment file", path, st.Size, MaxEnvFileSize)
	}
	f, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxEnvFileSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", path, err)
	case len(data) > MaxEnvFileSize:
		return nil, fmt.Errorf("%s grew past the %d bytes read of an environment file", path, MaxEnvFileSize)
	}
	return data, nil
}

// setEnv is env with kv in place of the assignment of its name, or added.
func setEnv(env []string, kv string) []string {
	name, _, _ := strings.Cut(kv, "=")
	for i, e := range env {
		if strings.HasPrefix(e, name+"=") {
			env[i] = kv
			return env
		}
	}
	return append(env, kv)
}

// unsetEnv removes what UnsetEnvironment= names: a NAME removes its
// assignment, a NAME=VALUE only that very assignment.
func unsetEnv(env, unset []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(unset, name) || slices.Contains(unset, kv)
	})
}
