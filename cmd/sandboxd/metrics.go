package main

import (
	"fmt"
	"log/slog"
	"os/user"
	"strconv"

	"github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/supervisor/metrics"
)

// serveMetrics serves m where [metrics] listen says, if it says (nil
// otherwise), in a goroutine of its own until the server's Close.
func serveMetrics(cfg config.Metrics, m *metrics.Metrics, log *slog.Logger) (*metrics.Server, error) {
	if cfg.Listen == "" {
		return nil, nil
	}
	gid := -1
	if cfg.Group != "" {
		g, err := groupID(cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("metrics.group = %q: %w", cfg.Group, err)
		}
		gid = g
	}
	return m.Serve(cfg.Listen, gid, log)
}

// groupID is group name's id (a number is one already).
func groupID(name string) (int, error) {
	if n, err := strconv.ParseUint(name, 10, 31); err == nil {
		return int(n), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}
