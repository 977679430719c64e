package config

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/sandboxd/sandboxd/units"
)

// Bounds on a project's environment: what every command of its sandboxes
// carries to the sandbox's init and through execve(2).
const (
	// MaxProjectEnv bounds a project's env entries, and MaxProjectEnvBytes
	// their length together.
	MaxProjectEnv      = 256
	MaxProjectEnvBytes = 64 << 10
	// MaxProjectUnits bounds a project's units.
	MaxProjectUnits = 16
)

const envRule = "want KEY=value entries, KEY of letters, digits and '_', not starting with a digit"

// projectEnv checks project i's units and env.
func (v *validator) projectEnv(i int, p Project) {
	arr := toml.Key{"project"}
	key := func(k string) string { return elemName(arr, i, toml.Key{k}) }

	unitLines := v.w.itemLines(arr, i, toml.Key{"units"}, len(p.Units))
	if len(p.Units) > MaxProjectUnits {
		v.add(v.projectLine(i, "units"), key("units"), nil, "%s lists %d units: at most %d", key("units"), len(p.Units), MaxProjectUnits)
	}
	seenUnit := map[string]int{}
	for j, u := range p.Units {
		if err := units.CheckServiceName(u); err != nil {
			v.add(unitLines[j], key("units"), err, "%s holds %q, which is not a service's unit name: %v; name host services, like \"nginx.service\"",
				key("units"), u, err)
		} else if first, dup := seenUnit[u]; dup {
			v.add(unitLines[j], key("units"), nil, "%s lists %q twice (%s): list each unit once", key("units"), u, lineWord(unitLines[first], unitLines[j]))
		} else {
			seenUnit[u] = j
		}
	}

	envLines := v.w.itemLines(arr, i, toml.Key{"env"}, len(p.Env))
	if len(p.Env) > MaxProjectEnv {
		v.add(v.projectLine(i, "env"), key("env"), nil, "%s has %d entries: at most %d", key("env"), len(p.Env), MaxProjectEnv)
	}
	size := 0
	seenVar := map[string]int{}
	for j, kv := range p.Env {
		size += len(kv)
		name, _, ok := strings.Cut(kv, "=")
		switch first, dup := seenVar[name]; {
		case !ok || !units.ValidEnvName(name):
			v.add(envLines[j], key("env"), nil, "%s holds %q: %s", key("env"), shortValue(kv), envRule)
		case strings.IndexByte(kv, 0) >= 0:
			v.add(envLines[j], key("env"), nil, "%s sets %s to a value with a NUL byte, which no environment can hold", key("env"), name)
		case dup:
			v.add(envLines[j], key("env"), nil, "%s sets %s twice (%s: %q and %q): set each variable once",
				key("env"), name, lineWord(envLines[first], envLines[j]), shortValue(p.Env[first]), shortValue(kv))
		default:
			seenVar[name] = j
		}
	}
	if size > MaxProjectEnvBytes {
		v.add(v.projectLine(i, "env"), key("env"), nil, "%s holds %d bytes: at most %d", key("env"), size, MaxProjectEnvBytes)
	}
}

// lineWord says where two items of a list are: "lines 3 and 5", "both on
// line 3", or "in the same list" when the lines are not known.
func lineWord(a, b int) string {
	switch {
	case a == 0 || b == 0:
		return "in the same list"
	case a == b:
		return fmt.Sprintf("both on line %d", a)
	}
	return fmt.Sprintf("lines %d and %d", a, b)
}

// shortValue cuts a long entry for a message.
func shortValue(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
