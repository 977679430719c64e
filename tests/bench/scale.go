package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// createSteps reads, from the daemon's journal since since, each
// "sandbox created" line's steps (supervisor's steps: "base=1.20ms ..."),
// in the order the creates ended.
func (d *daemon) createSteps(ctx context.Context, since time.Time) ([]map[string]time.Duration, error) {
	cmd := command(ctx, "journalctl", "--no-pager", "-o", "json", "-u", daemonUnit,
		"--since", "@"+strconv.FormatInt(since.Unix()-1, 10), "--output-fields", "MESSAGE,STEPS")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("reading the daemon's journal: %w", err)
	}
	var all []map[string]time.Duration
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Message string `json:"MESSAGE"`
			Steps   string `json:"STEPS"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || !strings.HasPrefix(e.Message, "sandbox created") || e.Steps == "" {
			continue
		}
		m := map[string]time.Duration{}
		for _, f := range strings.Fields(e.Steps) {
			name, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			x, err := strconv.ParseFloat(strings.TrimSuffix(v, "ms"), 64)
			if err != nil {
				continue
			}
			m[name] += time.Duration(x * float64(time.Millisecond))
		}
		all = append(all, m)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("reading the daemon's journal: %w", err)
	}
	return all, nil
}

// stepMedians is each step's median over steps, as "name=1.2" in the
// order of the first entry's names (sorted).
func stepMedians(steps []map[string]time.Duration) string {
	names := map[string]bool{}
	for _, m := range steps {
		for k := range m {
			names[k] = true
		}
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []string
	for _, k := range keys {
		var s series
		for _, m := range steps {
			s = append(s, m[k])
		}
		b = append(b, fmt.Sprintf("%s=%s", k, ms(s.median())))
	}
	return strings.Join(b, " ")
}

// benchScale makes cfg.live sandboxes of the largest project one after
// another and keeps them, timing each create, then destroys them all.
func benchScale(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, n int) (err error) {
	if !d.userns {
		if err := d.reconfigure(ctx, true); err != nil {
			return err
		}
	}
	project := projectName(n)
	defer func() {
		for id := range d.live {
			if derr := d.destroy(context.WithoutCancel(ctx), id); derr != nil && err == nil {
				err = derr
			}
		}
	}()
	projectDir := filepath.Join(fs.mount, projectPath(n))
	prim0, err := measurePrimitives(ctx, fs, projectDir, units.ScopeSlice(0, "bench-scale.scope"))
	if err != nil {
		return err
	}
	start := time.Now()
	creates, _, err := d.createMany(ctx, project, cfg.live, "scale")
	if err != nil {
		return err
	}
	primN, err := measurePrimitives(ctx, fs, projectDir, units.ScopeSlice(0, "bench-scale.scope"))
	if err != nil {
		return err
	}
	for _, p := range []primitives{prim0, primN} {
		progress("scale: primitives: snapshots %s subvolume %s deletes %s scope %s scope-alone %s stop %s",
			ms(p.snapshots.median()), ms(p.subvolume.median()), ms(p.deletes.median()), ms(p.scope.median()), ms(p.scopeAlone.median()), ms(p.stop.median()))
	}
	steps, err := d.createSteps(ctx, start)
	if err != nil {
		return err
	}
	progress("scale: %d journal lines of creates", len(steps))
	if len(steps) == 0 {
		out, _ := command(ctx, "journalctl", "--no-pager", "-o", "json", "-n", "3", "-u", daemonUnit).CombinedOutput()
		progress("%s", out)
	}
	for i := 0; i < len(creates); i += 100 {
		j := min(i+100, len(creates))
		s := slices.Clone(creates[i:j])
		p99, _ := s.percentile(0.99)
		line := fmt.Sprintf("creates %d-%d: p50 %s ms p99 %s ms", i+1, j, ms(s.median()), ms(p99))
		if j <= len(steps) {
			line += "; steps " + stepMedians(steps[i:j])
		}
		progress("scale: %s", line)
	}
	return nil
}
