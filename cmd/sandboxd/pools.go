package main

import (
	"log/slog"

	"github.com/sandboxd/sandboxd/supervisor/config"
	warmpool "github.com/sandboxd/sandboxd/supervisor/pool"
)

// warmPools is the pools' room's configuration: limits.pool and each
// project's own pool. Its Changes are nil, and every pool off, when no
// project has a pool or the pool's filesystem cannot be watched (then
// each create is a full one, said once in the journal); the room is made
// all the same, to destroy what a previous daemon pooled.
func warmPools(cfg *config.Config, root string, log *slog.Logger) warmpool.Config {
	sizes := map[string]int{}
	any := cfg.Limits.Pool > 0
	for _, p := range cfg.Projects {
		if p.Pool != nil {
			sizes[p.Name] = *p.Pool
			any = any || *p.Pool > 0
		}
	}
	pc := warmpool.Config{
		Size: func(project string) int {
			if n, ok := sizes[project]; ok {
				return n
			}
			return cfg.Limits.Pool
		},
	}
	if !any {
		return pc
	}
	w, err := warmpool.NewWatch(root)
	if err != nil {
		log.Warn("warm pools are off: a claim could not tell that its project is unchanged", "error", err)
		return pc
	}
	pc.Changes = w
	return pc
}
