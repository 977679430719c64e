package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

const metricsSocket = "/run/sandboxd/metrics.sock"

// scrapeMetrics reads the daemon's metrics at url over c, parsed as a
// Prometheus server parses them; it waits for the daemon just restarted.
func scrapeMetrics(t *testing.T, c *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.Get(url)
		if err != nil {
			last = err
			continue
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		if err != nil {
			t.Fatalf("parsing the metrics of %s: %v", url, err)
		}
		return fams
	}
	t.Fatalf("scraping %s: %v", url, last)
	return nil
}

func unixHTTP(path string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

// sample is the value of family name's sample whose labels are labels
// ("k=v" each; none: the one without labels): a counter's or gauge's
// value, a histogram's count; 0 if there is none (a family of owners
// with no owner yet).
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if !contains(labels, l.GetName()+"="+l.GetValue()) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0 // a labelled series not there: none counted (an owner with no sandboxes)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// curlAs runs curl as uid and gid (no other groups) against the socket,
// and returns its exit status and what it printed.
func curlAs(t *testing.T, uid, gid int, socket string) (int, string) {
	t.Helper()
	cmd := exec.Command("setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups",
		"curl", "-sS", "--max-time", "10", "--unix-socket", socket, "http://sandboxd/metrics")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func TestMetricsOnAUnixSocketCountWhatWasDone(t *testing.T) {
	install(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	reconfigure(t, "\n[metrics]\nlisten = \"unix:"+metricsSocket+"\"\n")
	c := unixHTTP(metricsSocket)
	before := scrapeMetrics(t, c, "http://sandboxd/metrics")

	fi, err := os.Lstat(metricsSocket)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("%s: mode %v, owner %d:%d; want a socket 0660 root:root", metricsSocket, fi.Mode(), st.Uid, st.Gid)
	}
	// A user who is not root cannot connect.
	if code, out := curlAs(t, 65534, 65534, metricsSocket); code == 0 || strings.Contains(out, "sandboxd_") {
		t.Fatalf("uid 65534 read the metrics (exit %d): %.300s", code, out)
	} else if !strings.Contains(out, "ermission denied") && code != 7 {
		t.Fatalf("uid 65534's curl: exit %d, %q; want a refused connection", code, out)
	}

	// Two sandboxes, a command, a create refused.
	a, _ := create(t)
	t.Cleanup(func() { ctl(t, "", "destroy", a) })
	b, _ := create(t)
	t.Cleanup(func() { ctl(t, "", "destroy", b) })
	ok(t, "exec", a, "--", "true")
	if out, err := exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "nosuch", "0").CombinedOutput(); err == nil {
		t.Fatalf("a create of an unknown project: %s", out)
	}
	after := scrapeMetrics(t, c, "http://sandboxd/metrics")
	for _, name := range []string{"sandboxd_creates_total", "sandboxd_create_duration_seconds", "sandboxd_commands_total",
		"sandboxd_promotions_total", "sandboxd_sandboxes", "sandboxd_owner_sandboxes", "sandboxd_owner_memory_promised_bytes"} {
		if after[name] == nil {
			t.Errorf("no family %s", name)
		}
	}

	for _, w := range []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"sandboxd_creates_total", []string{"outcome=ok"}, 2},
		{"sandboxd_creates_total", []string{"outcome=refused"}, 1},
		{"sandboxd_creates_total", []string{"outcome=failed"}, 0},
		{"sandboxd_create_duration_seconds", nil, 2},
		{"sandboxd_commands_total", []string{"kind=exec"}, 1},
		{"sandboxd_commands_total", []string{"kind=spawn"}, 0},
		{"sandboxd_owner_sandboxes", []string{"owner=0"}, 2},
	} {
		if d := sample(t, after, w.name, w.labels...) - sample(t, before, w.name, w.labels...); d != w.delta {
			t.Errorf("%s%v went up by %v, want %v", w.name, w.labels, d, w.delta)
		}
	}
	// Both sandboxes are ready or running (the exec's end may lag), none
	// is creating.
	live := sample(t, after, "sandboxd_sandboxes", "state=ready") + sample(t, after, "sandboxd_sandboxes", "state=running")
	was := sample(t, before, "sandboxd_sandboxes", "state=ready") + sample(t, before, "sandboxd_sandboxes", "state=running")
	if live-was != 2 {
		t.Errorf("ready and running sandboxes: %v before, %v after; want 2 more", was, live)
	}
	if n := sample(t, after, "sandboxd_sandboxes", "state=creating"); n != 0 {
		t.Errorf("%v sandboxes creating", n)
	}
	if sample(t, after, "sandboxd_owner_sandboxes_max") != 32 || after["go_goroutines"] == nil || after["process_resident_memory_bytes"] == nil {
		t.Errorf("the per-owner cap (want 32) or the go_ and process_ collectors are missing")
	}
	// No sandbox's id, name or project is a label.
	for _, f := range after {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := l.GetValue(); v == a || v == b || v == "web" || v == "nosuch" {
					t.Errorf("%s has label %s=%q", f.GetName(), l.GetName(), v)
				}
			}
		}
	}
}

func TestMetricsSocketGroupAndLoopback(t *testing.T) {
	install(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	// The socket's group may scrape; others still not.
	reconfigure(t, "\n[metrics]\nlisten = \"unix:"+metricsSocket+"\"\ngroup = \"65534\"\n")
	scrapeMetrics(t, unixHTTP(metricsSocket), "http://sandboxd/metrics")
	if code, out := curlAs(t, 65534, 65534, metricsSocket); code != 0 || !strings.Contains(out, "sandboxd_sandboxes{") {
		t.Fatalf("a member of the socket's group: exit %d, %.300s", code, out)
	}
	if code, out := curlAs(t, 65533, 65533, metricsSocket); code == 0 {
		t.Fatalf("uid 65533, not of the group, read the metrics: %.300s", out)
	}

	// A loopback address works too; the socket is gone.
	reconfigure(t, "\n[metrics]\nlisten = \"127.0.0.1:19477\"\n")
	fams := scrapeMetrics(t, &http.Client{Timeout: 10 * time.Second}, "http://127.0.0.1:19477/metrics")
	if fams["sandboxd_creates_total"] == nil || fams["sandboxd_sandboxes"] == nil {
		t.Fatal("the loopback address serves no sandboxd_ metrics")
	}
	if _, err := os.Lstat(metricsSocket); !os.IsNotExist(err) {
		t.Errorf("%s is left after the daemon stopped serving it: %v", metricsSocket, err)
	}

	// An address others reach: the daemon does not start, and says why.
	if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(baseConfig(testbed.Require(t))+"\n[metrics]\nlisten = \"0.0.0.0:19477\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = exec.Command("systemctl", "restart", "sandboxd.service").Run()
	out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "-n", "30")
	if !strings.Contains(out, "metrics.listen") || !strings.Contains(out, "not a loopback address") {
		t.Errorf("the journal does not say why 0.0.0.0 was refused:\n%s", out)
	}
	// reconfigure's cleanup puts the usual configuration back.
}
