package projects

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Env is the environment of one of the configuration's projects:
// that of host services, each as systemd gives it to the service, then
// Env's KEY=value entries; a later assignment wins.
type Env struct {
	Units []string // service units, like "nginx.service"
	Env   []string
}

// serviceEnvironment is what Config.Units must also do when a project
// names units: *units.Manager does (units.Manager.ServiceEnvironment).
type serviceEnvironment interface {
	ServiceEnvironment(ctx context.Context, name string) ([]string, error)
}

// Bounds on a project's environment, which every command carries through
// the init's socket and execve(2): Linux refuses an assignment of 128KiB
// or more (MAX_ARG_STRLEN) and the whole must leave room for the rest.
const (
	maxEnvAssignment = 128<<10 - 1
	maxProjectEnv    = 256 << 10
)

// Env reads project's environment (Config.Env) now: a unit that cannot
// be read fails it, naming the unit.
func (r *Registry) Env(ctx context.Context, project string) ([]string, error) {
	pe := r.cfg.Env[project]
	if len(pe.Units)+len(pe.Env) == 0 {
		return nil, nil
	}
	var env []string
	for _, unit := range pe.Units {
		u, ok := r.cfg.Units.(serviceEnvironment)
		if !ok {
			return nil, fmt.Errorf("project %s names unit %s, whose environment cannot be read here", project, unit)
		}
		e, err := u.ServiceEnvironment(ctx, unit)
		if err != nil {
			return nil, fmt.Errorf("the environment of unit %s, which project %s names in sandboxd.toml: %w", unit, project, err)
		}
		for _, kv := range e {
			if len(kv) > maxEnvAssignment {
				name, _, _ := strings.Cut(kv, "=")
				return nil, fmt.Errorf("the environment of unit %s, which project %s names in sandboxd.toml: %s is %d bytes long; a command's environment holds at most %d per variable",
					unit, project, name, len(kv), maxEnvAssignment)
			}
		}
		env = MergeEnv(env, e)
	}
	env = MergeEnv(env, pe.Env)
	size := 0
	for _, kv := range env {
		size += len(kv) + 1
	}
	if size > maxProjectEnv {
		return nil, fmt.Errorf("the environment of project %s (its units' and its env's) is %d bytes: at most %d", project, size, maxProjectEnv)
	}
	return env, nil
}

// MergeEnv is base with each of over's KEY=value in place of base's.
func MergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		key, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, key+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}
