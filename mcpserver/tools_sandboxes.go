package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The tools about sandboxes themselves: create, list, status, destroy.

type createIn struct {
	Project string   `json:"project" jsonschema:"the project to copy (sandbox_list lists them)"`
	Name    string   `json:"name,omitempty" jsonschema:"a name for the sandbox, unique on the host: letters, digits, '-', '_' and '.'"`
	Profile string   `json:"profile,omitempty" jsonschema:"the profile whose settings fill what is not given (default, untrusted, trusted, or the host's own)"`
	Network string   `json:"network,omitempty" jsonschema:"none (only its own loopback), allowlist (only what allow lists, through a proxy) or host; default: the profile's"`
	Allow   []string `json:"allow,omitempty" jsonschema:"with network allowlist: what it may reach, as host:port, *.example.com:443 or 10.0.0.0/8:*"`
	Memory  string   `json:"memory,omitempty" jsonschema:"its memory limit, as 512M or 2G"`
	TTL     int      `json:"ttl_minutes,omitempty" jsonschema:"destroy it after this many minutes"`
	Boot    bool     `json:"boot,omitempty" jsonschema:"run a systemd of its own, to run the host's services in it (exec with root: systemctl start nginx) on its copies of their files; wait until system_status says running or degraded; not with network host"`
}

type sandboxOut struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Project string `json:"project"`
	State   string `json:"state" jsonschema:"ready, running, frozen, stopped, promoting, ..."`
	Owner   uint32 `json:"owner" jsonschema:"the uid that made it"`
	Created string `json:"created"`
}

type listIn struct{}

type projectOut struct {
	Name     string `json:"name"`
	Location string `json:"location" jsonschema:"its btrfs subvolume or ZFS dataset on the host"`
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes" jsonschema:"the sandboxes you may use, oldest first"`
	Projects  []projectOut `json:"projects" jsonschema:"the projects you may make sandboxes of"`
}

type statusOut struct {
	sandboxOut
	Expires         string            `json:"expires,omitempty" jsonschema:"when its time to live ends"`
	Path            string            `json:"path" jsonschema:"where its copy of the project is on the host"`
	Profile         string            `json:"profile,omitempty"`
	Network         string            `json:"network" jsonschema:"none, allowlist or host"`
	Allow           []string          `json:"allow,omitempty" jsonschema:"what an allowlist lets through"`
	ReadOnlyProject bool              `json:"read_only_project,omitempty"`
	Boot            bool              `json:"boot,omitempty" jsonschema:"it runs a systemd of its own (system_status)"`
	FrozenIdle      bool              `json:"frozen_idle,omitempty" jsonschema:"frozen for being idle: the next call thaws it"`
	Staleness       string            `json:"staleness" jsonschema:"current, or stale when the project moved on since the sandbox was made"`
	Limits          limitsOut         `json:"limits"`
	Usage           usageOut          `json:"usage"`
	Checkpoints     []checkpointEntry `json:"checkpoints"`
}

type limitsOut struct {
	MemoryMax  string `json:"memory_max,omitempty"`
	MemoryHigh string `json:"memory_high,omitempty"`
	TasksMax   uint64 `json:"tasks_max,omitempty"`
	CPUQuota   string `json:"cpu_quota,omitempty"`
	RuntimeMax string `json:"runtime_max,omitempty"`
	DiskQuota  string `json:"disk_quota,omitempty"`
}

type usageOut struct {
	MemoryBytes     *uint64  `json:"memory_bytes,omitempty"`
	MemoryPeakBytes *uint64  `json:"memory_peak_bytes,omitempty"`
	CPUSeconds      *float64 `json:"cpu_seconds,omitempty"`
	Tasks           *uint64  `json:"tasks,omitempty"`
	DiskUsedBytes   *uint64  `json:"disk_used_bytes,omitempty"`
}

type checkpointEntry struct {
	Name    string `json:"name"`
	Created string `json:"created"`
}

type destroyOut struct {
	Destroyed string `json:"destroyed" jsonschema:"the id of the sandbox destroyed"`
}

func (s *server) addSandboxTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "sandbox_create", Annotations: additive("Create a sandbox"),
		Description: "Make a sandbox: a copy-on-write copy of a project (instant, whatever its size), seen inside a view of this host's system, with limits; with boot, it runs a systemd of its own, to run the host's services in. Returns its status; its id or name is what the other tools take."},
		s.create)
	add(s, m, &mcp.Tool{Name: "sandbox_list", Annotations: readOnly("List sandboxes and projects"),
		Description: "List the sandboxes you may use, and the projects you may make sandboxes of."},
		s.list)
	add(s, m, &mcp.Tool{Name: "sandbox_status", Annotations: readOnly("Sandbox status"),
		Description: "Show a sandbox's state, network policy, limits, usage, checkpoints, whether it was made with boot, and whether its project moved on since it was made."},
		s.status)
	add(s, m, &mcp.Tool{Name: "sandbox_destroy", Annotations: destructive("Destroy a sandbox"),
		Description: "Destroy a sandbox: its processes are stopped and its files deleted. What was not promoted is lost."},
		s.destroy)
}

func (s *server) create(ctx context.Context, in createIn) (statusOut, error) {
	opts := client.CreateOptions{Name: in.Name, Profile: in.Profile, Network: in.Network, Allow: in.Allow, Boot: in.Boot}
	switch in.Network {
	case "", client.NetworkNone, client.NetworkAllowlist, client.NetworkHost:
	default:
		return statusOut{}, invalidf("network %q is none of none, allowlist, host", in.Network)
	}
	if in.Memory != "" {
		size, err := sandboxd1.ParseSize(in.Memory)
		if err != nil {
			return statusOut{}, invalidf("memory %q: %v", in.Memory, err)
		}
		opts.MemoryMax = size
	}
	if in.TTL < 0 {
		return statusOut{}, invalidf("ttl_minutes is %d: give a positive number", in.TTL)
	}
	opts.TTL = time.Duration(in.TTL) * time.Minute
	sb, err := s.c.Create(ctx, in.Project, opts)
	if err != nil {
		return statusOut{}, err
	}
	return s.statusOf(ctx, sb)
}

func (s *server) list(ctx context.Context, _ listIn) (listOut, error) {
	entries, err := s.c.List(ctx)
	if err != nil {
		return listOut{}, err
	}
	projects, err := s.c.Projects(ctx)
	if err != nil {
		return listOut{}, err
	}
	out := listOut{Sandboxes: []sandboxOut{}, Projects: []projectOut{}}
	for _, e := range entries {
		out.Sandboxes = append(out.Sandboxes, sandboxOut{ID: e.ID, Name: e.Name, Project: e.Project, State: e.State,
			Owner: e.Owner, Created: micros(e.Created)})
	}
	for _, p := range projects {
		out.Projects = append(out.Projects, projectOut{Name: p.Name, Location: p.Location})
	}
	return out, nil
}

func (s *server) status(ctx context.Context, in sandboxArg) (statusOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return statusOut{}, err
	}
	return s.statusOf(ctx, sb)
}

func (s *server) statusOf(ctx context.Context, sb *client.Sandbox) (statusOut, error) {
	st, err := sb.Status(ctx)
	if err != nil {
		return statusOut{}, err
	}
	s.remember(st)
	cps, err := sb.Checkpoints(ctx)
	if err != nil {
		return statusOut{}, err
	}
	out := statusOut{
		sandboxOut: sandboxOut{ID: st.ID, Name: st.Name, Project: st.Project, State: st.State, Owner: st.Owner,
			Created: timeText(st.Created)},
		Expires: timeText(st.Expires), Path: st.Path, Profile: st.Profile, Network: st.Network, Allow: st.Allow,
		ReadOnlyProject: st.ReadOnlyProject, Boot: st.Boot, FrozenIdle: st.FrozenIdle, Staleness: st.Staleness,
		Limits: limitsOf(st.Limits), Usage: usageOf(st.Usage), Checkpoints: []checkpointEntry{},
	}
	for _, cp := range cps {
		out.Checkpoints = append(out.Checkpoints, checkpointEntry{Name: cp.Name, Created: micros(cp.Created)})
	}
	return out, nil
}

func limitsOf(l client.Limits) limitsOut {
	size := func(v sandboxd1.Size) string {
		if v == 0 {
			return ""
		}
		return v.String()
	}
	out := limitsOut{MemoryMax: size(l.MemoryMax), MemoryHigh: size(l.MemoryHigh), TasksMax: l.TasksMax, DiskQuota: size(l.DiskQuota)}
	if l.CPUQuota > 0 {
		out.CPUQuota = l.CPUQuota.String()
	}
	if l.RuntimeMax > 0 {
		out.RuntimeMax = l.RuntimeMax.String()
	}
	return out
}

func usageOf(u client.Usage) usageOut {
	out := usageOut{MemoryBytes: u.MemoryCurrent, MemoryPeakBytes: u.MemoryPeak, Tasks: u.TasksCurrent, DiskUsedBytes: u.DiskUsed}
	if u.CPU != nil {
		out.CPUSeconds = new(u.CPU.Seconds())
	}
	return out
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (s *server) destroy(ctx context.Context, in sandboxArg) (destroyOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return destroyOut{}, err
	}
	// Its sessions end with it; the server forgets them first, so that a
	// repl call meanwhile does not find a dead one.
	s.repl.forget(sb.ID())
	if err := sb.Destroy(ctx); err != nil {
		return destroyOut{}, err
	}
	s.mu.Lock()
	delete(s.networks, sb.ID())
	s.mu.Unlock()
	return destroyOut{Destroyed: sb.ID()}, nil
}

// network is a sandbox's network policy, as exec tells it.
type network struct {
	policy string
	allow  []string
}

func (s *server) remember(st client.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.networks[st.ID] = network{policy: st.Network, allow: st.Allow}
}

// networkOf is a sandbox's network policy, read once.
func (s *server) networkOf(ctx context.Context, sb *client.Sandbox) (network, error) {
	s.mu.Lock()
	n, ok := s.networks[sb.ID()]
	s.mu.Unlock()
	if ok {
		return n, nil
	}
	st, err := sb.Status(ctx)
	if err != nil {
		return network{}, fmt.Errorf("reading the network policy of sandbox %s: %w", sb.ID(), err)
	}
	s.remember(st)
	return network{policy: st.Network, allow: st.Allow}, nil
}
