package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// fakeHost is hosttest's Host with the policy the room reports against.
type fakeHost struct {
	*hosttest.Host
	policy supervisor.Policy
}

func (f fakeHost) Policy() supervisor.Policy { return f.policy }

func newUnit(t *testing.T, policy supervisor.Policy, cfg Config) (*Metrics, *hosttest.Host) {
	t.Helper()
	h := hosttest.New(t, nil, unitsfake.New())
	return New(fakeHost{h, policy}, cfg), h
}

func record(t *testing.T, h *hosttest.Host, id string, owner uint32, memoryMax uint64, st state.State) {
	t.Helper()
	l, err := json.Marshal(units.Limits{MemoryMax: &memoryMax})
	if err != nil {
		t.Fatal(err)
	}
	h.AddSandbox(t, state.Record{ID: id, Name: "name-" + id, Project: "web", Owner: owner, State: st, Limits: l})
}

func TestUnitSandboxesByStateAndOwnersAgainstTheCaps(t *testing.T) {
	m, h := newUnit(t, supervisor.Policy{MaxPerOwner: 3, MaxSandboxes: 10, MaxMemory: 8 << 30}, Config{UserMemoryMax: 2 << 30, NoProcess: true})
	record(t, h, "a1", 1000, 1<<30, state.Ready)
	record(t, h, "a2", 1000, 512<<20, state.Frozen)
	record(t, h, "b1", 1001, 256<<20, state.Stopped)
	record(t, h, "b2", 1001, 1<<30, state.Destroying) // on its way out: not live

	want := `
# HELP sandboxd_sandboxes Sandboxes by the state their record holds.
# TYPE sandboxd_sandboxes gauge
sandboxd_sandboxes{state="creating"} 0
sandboxd_sandboxes{state="destroying"} 1
sandboxd_sandboxes{state="frozen"} 1
sandboxd_sandboxes{state="promoting"} 0
sandboxd_sandboxes{state="ready"} 1
sandboxd_sandboxes{state="running"} 0
sandboxd_sandboxes{state="stopped"} 1
# HELP sandboxd_owner_sandboxes Live sandboxes (any state but destroying) of each owner that has some, by uid.
# TYPE sandboxd_owner_sandboxes gauge
sandboxd_owner_sandboxes{owner="1000"} 2
sandboxd_owner_sandboxes{owner="1001"} 1
# HELP sandboxd_owner_sandboxes_max The cap on one owner's live sandboxes (limits.max_sandboxes_per_user; 0: none).
# TYPE sandboxd_owner_sandboxes_max gauge
sandboxd_owner_sandboxes_max 3
# HELP sandboxd_owner_memory_promised_bytes The MemoryMax of each owner's live sandboxes, summed, by uid.
# TYPE sandboxd_owner_memory_promised_bytes gauge
sandboxd_owner_memory_promised_bytes{owner="1000"} 1.610612736e+09
sandboxd_owner_memory_promised_bytes{owner="1001"} 2.68435456e+08
# HELP sandboxd_owner_memory_max_bytes The bound on all of one owner's sandboxes together (limits.user_memory_max; 0: none).
# TYPE sandboxd_owner_memory_max_bytes gauge
sandboxd_owner_memory_max_bytes 2.147483648e+09
# HELP sandboxd_memory_promised_bytes The MemoryMax of every live sandbox, summed.
# TYPE sandboxd_memory_promised_bytes gauge
sandboxd_memory_promised_bytes 1.879048192e+09
# HELP sandboxd_sandboxes_max The cap on live sandboxes over all owners (limits.max_sandboxes; 0: none).
# TYPE sandboxd_sandboxes_max gauge
sandboxd_sandboxes_max 10
`
	names := []string{"sandboxd_sandboxes", "sandboxd_owner_sandboxes", "sandboxd_owner_sandboxes_max", "sandboxd_owner_memory_promised_bytes",
		"sandboxd_owner_memory_max_bytes", "sandboxd_memory_promised_bytes", "sandboxd_sandboxes_max"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// A sandbox's name or project is never a label.
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if strings.Contains(l.GetValue(), "name-") || l.GetValue() == "web" {
					t.Errorf("%s has label %s=%q: a sandbox's name or project", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestUnitAuditedCountsCreatesCommandsAndPromotions(t *testing.T) {
	m, _ := newUnit(t, supervisor.Policy{}, Config{NoProcess: true})
	ok := func(action string) audit.Entry { return audit.Entry{Action: action, Result: "ok"} }
	prom := func(action, st string, err bool) audit.Entry {
		e := audit.Entry{Action: action, Result: "ok", Promotion: &audit.Promotion{ID: "p", State: st}}
		if err {
			e.Result = "error"
		}
		return e
	}
	for _, e := range []audit.Entry{
		ok("create"), ok("create"),
		{Action: "create", Result: "error", Refused: true},
		{Action: "create", Result: "error"},
		ok("exec"), ok("exec"), ok("spawn"), ok("eval"),
		{Action: "exec", Result: "error", Refused: true}, // not started
		ok("destroy"), ok("checkpoint"), // not counted here
		prom("promote", "running", false),
		prom("promote-stage", "running", false), // a stage passed: no outcome
		prom("promote-waiting", "waiting", false),
		prom("promote-reject", "rejected", false),
		prom("promote", "", true),
		{Action: "promote", Result: "error", Refused: true},
		prom("promote-stage", "failed", true),
		prom("promote-done", "done", false),
		prom("promote-interrupted", "failed", true),
	} {
		m.Audited(e)
	}
	m.CreateTook(300 * time.Millisecond)
	m.CreateTook(2 * time.Second)

	for _, c := range []struct {
		outcome string
		want    float64
	}{{OutcomeOK, 2}, {OutcomeRefused, 1}, {OutcomeFailed, 1}} {
		if got := testutil.ToFloat64(m.creates.WithLabelValues(c.outcome)); got != c.want {
			t.Errorf("creates %s = %v, want %v", c.outcome, got, c.want)
		}
	}
	for _, c := range []struct {
		kind string
		want float64
	}{{"exec", 2}, {"spawn", 1}, {"eval", 1}} {
		if got := testutil.ToFloat64(m.commands.WithLabelValues(c.kind)); got != c.want {
			t.Errorf("commands %s = %v, want %v", c.kind, got, c.want)
		}
	}
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"started", 1}, {"refused", 1}, {"waiting", 1}, {"rejected", 1}, {"failed", 2}, {"promoted", 1}, {"interrupted", 1}} {
		if got := testutil.ToFloat64(m.promotions.WithLabelValues(c.outcome)); got != c.want {
			t.Errorf("promotions %s = %v, want %v", c.outcome, got, c.want)
		}
	}
	var h dto.Metric
	if err := m.createTook.Write(&h); err != nil {
		t.Fatal(err)
	}
	if h.GetHistogram().GetSampleCount() != 2 || h.GetHistogram().GetSampleSum() != 2.3 {
		t.Errorf("create durations: count %d sum %v, want 2 and 2.3", h.GetHistogram().GetSampleCount(), h.GetHistogram().GetSampleSum())
	}
	var none *Metrics
	none.CreateTook(time.Second) // a room not made records nothing
}

func TestUnitCheckListenRefusesTheNetwork(t *testing.T) {
	for _, ok := range []string{"unix:/run/sandboxd/metrics.sock", "127.0.0.1:9477", "127.0.0.2:9477", "[::1]:9477"} {
		if err := CheckListen(ok); err != nil {
			t.Errorf("CheckListen(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:9477", ":9477", "[::]:9477", "10.0.0.1:9477", "localhost:9477", "unix:relative.sock",
		"unix:/run/../tmp/x.sock", "127.0.0.1", "127.0.0.1:port", "http://127.0.0.1:9477"} {
		if err := CheckListen(bad); err == nil {
			t.Errorf("CheckListen(%q) = nil, want an error", bad)
		}
	}
}

// scrape reads the metrics over c from url and parses them as a
// Prometheus server does.
func scrape(t *testing.T, c *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

func TestUnitServeOnAUnixSocketReplacesAStaleOneAndRefusesALink(t *testing.T) {
	m, h := newUnit(t, supervisor.Policy{MaxPerOwner: 3}, Config{})
	record(t, h, "a1", 1000, 1<<30, state.Ready)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "metrics.sock")
	// A stale socket, as a crash leaves it.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	s, err := m.Serve(UnixPrefix+path, -1, h.L)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != SocketMode {
		t.Errorf("socket %s: mode %v, want a socket of mode %v", path, fi.Mode(), os.FileMode(SocketMode))
	}
	fams := scrape(t, unixClient(path), "http://sandboxd/metrics")
	if f := fams["sandboxd_owner_sandboxes"]; f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("sandboxd_owner_sandboxes = %v, want owner 1000 at 1", f)
	}
	if fams["go_goroutines"] == nil || fams["process_open_fds"] == nil {
		t.Errorf("the go_ and process_ collectors are missing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
	// A link planted where the socket goes is not followed nor replaced.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if s, err := m.Serve(UnixPrefix+path, -1, h.L); err == nil {
		s.Close()
		t.Fatal("Serve replaced a symlink")
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q, %v", b, err)
	}
	// A directory others may write is refused.
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if s, err := m.Serve(UnixPrefix+filepath.Join(open, "m.sock"), -1, h.L); err == nil {
		s.Close()
		t.Fatal("Serve made a socket in a directory anyone may write")
	}
}

func TestUnitServeOnLoopback(t *testing.T) {
	m, h := newUnit(t, supervisor.Policy{}, Config{NoProcess: true})
	if _, err := m.Serve("0.0.0.0:0", -1, h.L); err == nil {
		t.Fatal("Serve listened on every address")
	}
	s, err := m.Serve("127.0.0.1:0", -1, h.L)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fams := scrape(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.Addr().String()+"/metrics")
	if fams["sandboxd_creates_total"] == nil || fams["sandboxd_sandboxes"] == nil {
		t.Errorf("families: missing sandboxd_creates_total or sandboxd_sandboxes")
	}
}

// A scrape with 1,000 sandboxes reads the entries in memory: it stays
// well under a millisecond a sandbox (about 8 ms in all, measured here
// on 2 cores busy with other tests).
func TestUnitAScrapeOfAThousandSandboxesIsCheap(t *testing.T) {
	if testing.Short() {
		t.Skip("adds 1,000 records")
	}
	m, h := newUnit(t, supervisor.Policy{MaxPerOwner: 32}, Config{NoProcess: true})
	for i := range 1000 {
		record(t, h, fmt.Sprintf("s%04d", i), uint32(1000+i%50), 256<<20, state.Ready)
	}
	start := time.Now()
	const scrapes = 20
	for range scrapes {
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(fams) == 0 {
			t.Fatal("nothing gathered")
		}
	}
	per := time.Since(start) / scrapes
	t.Logf("a scrape of 1,000 sandboxes of 50 owners: %v", per)
	if per > 200*time.Millisecond {
		t.Errorf("a scrape of 1,000 sandboxes took %v", per)
	}
}
