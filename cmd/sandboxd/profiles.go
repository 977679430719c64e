package main

import (
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/config"
)

// profiles turns the configuration's profiles (built-in and the file's)
// into the supervisor's, checking each allowlist's entries, which the
// configuration reads only as strings.
func profiles(cfg *config.Config) (map[string]supervisor.Profile, error) {
	out := map[string]supervisor.Profile{}
	for _, name := range cfg.ProfileNames() {
		p, _ := cfg.Profile(name)
		if _, err := egress.ParseAllowlist(p.Allow); err != nil {
			return nil, fmt.Errorf("profile %s: %w", name, err)
		}
		sp := supervisor.Profile{
			Network: p.NetworkMode(),
			Allow:   p.Allow,
			// The host's lists are the supervisor's own; these are the
			// profile's additions.
			Hidden:   p.HiddenPaths,
			ReadOnly: p.ReadonlyPaths,
		}
		if p.MemoryMax != nil && *p.MemoryMax > 0 {
			sp.Limits.MemoryMax = new(uint64(*p.MemoryMax))
		}
		if p.TasksMax != nil {
			sp.Limits.TasksMax = new(uint64(*p.TasksMax))
		}
		if p.CPUQuota != nil {
			sp.Limits.CPUQuota = new(time.Duration(p.CPUQuota.PerSecUSec()) * time.Microsecond)
		}
		if p.RuntimeMax != nil && *p.RuntimeMax > 0 {
			sp.Limits.RuntimeMax = new(time.Duration(*p.RuntimeMax))
		}
		if p.DiskQuota != nil {
			sp.DiskQuota = uint64(*p.DiskQuota)
		}
		if p.TTL != nil {
			sp.TTL = time.Duration(*p.TTL)
		}
		if p.ReadonlyProject != nil {
			sp.ReadOnlyProject = *p.ReadonlyProject
		}
		out[name] = sp
	}
	return out, nil
}
