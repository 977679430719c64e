package metrics

import (
	"encoding/json"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// states are the sandboxes' states, each reported (0 when none is in it).
var states = []state.State{state.Creating, state.Ready, state.Running, state.Frozen, state.Stopped, state.Promoting, state.Destroying}

var (
	sandboxesDesc = prometheus.NewDesc("sandboxd_sandboxes",
		"Sandboxes by the state their record holds.", []string{"state"}, nil)
	sandboxesMaxDesc = prometheus.NewDesc("sandboxd_sandboxes_max",
		"The cap on live sandboxes over all owners (limits.max_sandboxes; 0: none).", nil, nil)
	ownerSandboxesDesc = prometheus.NewDesc("sandboxd_owner_sandboxes",
		"Live sandboxes (any state but destroying) of each owner that has some, by uid.", []string{"owner"}, nil)
	ownerSandboxesMaxDesc = prometheus.NewDesc("sandboxd_owner_sandboxes_max",
		"The cap on one owner's live sandboxes (limits.max_sandboxes_per_user; 0: none).", nil, nil)
	ownerMemoryDesc = prometheus.NewDesc("sandboxd_owner_memory_promised_bytes",
		"The MemoryMax of each owner's live sandboxes, summed, by uid.", []string{"owner"}, nil)
	ownerMemoryMaxDesc = prometheus.NewDesc("sandboxd_owner_memory_max_bytes",
		"The bound on all of one owner's sandboxes together (limits.user_memory_max; 0: none).", nil, nil)
	memoryDesc = prometheus.NewDesc("sandboxd_memory_promised_bytes",
		"The MemoryMax of every live sandbox, summed.", nil, nil)
	memoryMaxDesc = prometheus.NewDesc("sandboxd_memory_promised_max_bytes",
		"The cap on the live sandboxes' MemoryMax summed (limits.max_memory; 0: none).", nil, nil)
)

// usage reports the sandboxes and each owner's use of the caps as a
// scrape asks, from the store's entries in memory: one copy of them
// taken under the store's own lock, no database read, no systemd call,
// neither a sandbox's lock nor the admission lock. With 1,000 sandboxes a
// scrape decodes 1,000 small limits objects (the admission's own work
// per create).
type usage struct{ m *Metrics }

func (u *usage) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxesDesc, sandboxesMaxDesc, ownerSandboxesDesc, ownerSandboxesMaxDesc,
		ownerMemoryDesc, ownerMemoryMaxDesc, memoryDesc, memoryMaxDesc} {
		ch <- d
	}
}

// owned is one owner's live sandboxes and their memory promised.
type owned struct {
	sandboxes int
	memory    uint64
}

func (u *usage) Collect(ch chan<- prometheus.Metric) {
	entries := u.m.h.Store().Entries()
	byState := map[state.State]int{}
	for _, e := range entries {
		byState[e.State]++
	}
	for _, st := range states {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(byState[st]), string(st))
	}
	owners := map[uint32]*owned{}
	var all uint64
	for _, e := range admission.Live(entries) {
		o := owners[e.Owner]
		if o == nil {
			o = &owned{}
			owners[e.Owner] = o
		}
		o.sandboxes++
		mem := memoryMax(e.Limits)
		o.memory += mem
		all += mem
	}
	for uid, o := range owners {
		owner := strconv.FormatUint(uint64(uid), 10)
		ch <- prometheus.MustNewConstMetric(ownerSandboxesDesc, prometheus.GaugeValue, float64(o.sandboxes), owner)
		ch <- prometheus.MustNewConstMetric(ownerMemoryDesc, prometheus.GaugeValue, float64(o.memory), owner)
	}
	p := u.m.h.Policy()
	ch <- prometheus.MustNewConstMetric(sandboxesMaxDesc, prometheus.GaugeValue, float64(p.MaxSandboxes))
	ch <- prometheus.MustNewConstMetric(ownerSandboxesMaxDesc, prometheus.GaugeValue, float64(p.MaxPerOwner))
	ch <- prometheus.MustNewConstMetric(ownerMemoryMaxDesc, prometheus.GaugeValue, float64(u.m.cfg.UserMemoryMax))
	ch <- prometheus.MustNewConstMetric(memoryDesc, prometheus.GaugeValue, float64(all))
	ch <- prometheus.MustNewConstMetric(memoryMaxDesc, prometheus.GaugeValue, float64(p.MaxMemory))
}

// memoryMax is the MemoryMax in a record's limits (0: none set).
func memoryMax(raw json.RawMessage) uint64 {
	var l units.Limits
	if len(raw) == 0 || json.Unmarshal(raw, &l) != nil || l.MemoryMax == nil {
		return 0
	}
	return *l.MemoryMax
}
