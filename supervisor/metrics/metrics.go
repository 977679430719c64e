package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
)

// Host is what the room needs of the core: its Host (the store's
// entries) and the admission policy in force (the caps).
type Host interface {
	supervisor.Host
	Policy() supervisor.Policy
}

// Config is what the room reports beside the core's policy.
type Config struct {
	// UserMemoryMax is the bound on all of one owner's sandboxes
	// together (limits.user_memory_max; 0: none).
	UserMemoryMax uint64
	// NoProcess leaves out the go_ and process_ collectors (tests that
	// compare every family).
	NoProcess bool
}

// Outcomes of a create, as the audit log tells them.
const (
	OutcomeOK      = "ok"      // a sandbox was made
	OutcomeRefused = "refused" // the caller's fault: access, input, a cap
	OutcomeFailed  = "failed"  // the daemon's or the host's
)

// Kinds of commands counted.
var commandKinds = []string{"exec", "spawn", "eval"}

// Outcomes of promotions counted, in the order a promotion meets them.
var promotionOutcomes = []string{"started", "refused", "waiting", "promoted", "rejected", "failed", "interrupted"}

// Metrics is the room: its registry and the counters the audit log feeds.
type Metrics struct {
	h   Host
	cfg Config
	reg *prometheus.Registry

	creates    *prometheus.CounterVec
	createTook prometheus.Histogram
	commands   *prometheus.CounterVec
	promotions *prometheus.CounterVec
}

// New makes the room over h and registers its metrics. It joins no hook:
// the daemon hands Audited to the audit log (audit.Log.Observe) and the
// front door calls CreateTook.
func New(h Host, cfg Config) *Metrics {
	m := &Metrics{h: h, cfg: cfg, reg: prometheus.NewRegistry()}
	m.creates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_creates_total",
		Help: "Sandbox creates by outcome: ok, refused (the caller's fault: access, input, a cap) or failed (the daemon's or the host's); every create, a caller's, try's, a fork's or a promotion's checks'.",
	}, []string{"outcome"})
	m.createTook = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sandboxd_create_duration_seconds",
		Help:    "How long a CreateSandbox call that made a sandbox took, from the call to its answer.",
		Buckets: []float64{0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 60},
	})
	m.commands = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_commands_total",
		Help: "Commands started in sandboxes, by kind: exec (a command, a shell), spawn (a background process) or eval (an input to an interpreter session).",
	}, []string{"kind"})
	m.promotions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_promotions_total",
		Help: "Promotions' steps by outcome: started, refused (at the call), waiting (for an admin), promoted (every stage passed), rejected (by an admin), failed (the call, or a stage rolled back), interrupted (by a restart of the daemon).",
	}, []string{"outcome"})
	for _, o := range []string{OutcomeOK, OutcomeRefused, OutcomeFailed} {
		m.creates.WithLabelValues(o)
	}
	for _, k := range commandKinds {
		m.commands.WithLabelValues(k)
	}
	for _, o := range promotionOutcomes {
		m.promotions.WithLabelValues(o)
	}
	m.reg.MustRegister(m.creates, m.createTook, m.commands, m.promotions, &usage{m})
	if !cfg.NoProcess {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is what the room serves (tests gather it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// CreateTook records how long a CreateSandbox call that made a sandbox
// took. A nil room records nothing.
func (m *Metrics) CreateTook(d time.Duration) {
	if m != nil {
		m.createTook.Observe(d.Seconds())
	}
}

// Audited counts entry e of the audit log: a create, a command, a
// promotion's step. The log calls it for every entry it is given.
func (m *Metrics) Audited(e audit.Entry) {
	ok := e.Result == "ok"
	switch e.Action {
	case "create":
		switch {
		case ok:
			m.creates.WithLabelValues(OutcomeOK).Inc()
		case e.Refused:
			m.creates.WithLabelValues(OutcomeRefused).Inc()
		default:
			m.creates.WithLabelValues(OutcomeFailed).Inc()
		}
	case "exec", "spawn", "eval":
		if ok {
			m.commands.WithLabelValues(e.Action).Inc()
		}
	default:
		if o := promotionOutcome(e); o != "" {
			m.promotions.WithLabelValues(o).Inc()
		}
	}
}

// promotionOutcome is what a promotion's audit line says of its end, or
// "" for a line that ends nothing (a stage passed, an approval).
func promotionOutcome(e audit.Entry) string {
	ok := e.Result == "ok"
	var st string
	if e.Promotion != nil {
		st = e.Promotion.State
	}
	switch e.Action {
	case "promote":
		switch {
		case ok:
			return "started"
		case e.Refused:
			return "refused"
		default:
			return "failed"
		}
	case "promote-waiting":
		return "waiting"
	case "promote-stage":
		if !ok || st == "failed" {
			return "failed"
		}
	case "promote-done":
		switch st {
		case "done":
			return "promoted"
		case "failed":
			return "failed"
		case "rejected":
			return "rejected"
		}
	case "promote-reject":
		if ok {
			return "rejected"
		}
	case "promote-interrupted":
		return "interrupted"
	}
	return ""
}
