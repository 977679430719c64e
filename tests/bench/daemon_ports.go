package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// An exposed port's throughput: a web server in the sandbox, reached from
// the bench through the port's unix socket and its loopback TCP address,
// beside the same server run by the bench outside any sandbox and reached
// over a direct loopback connection. The three are measured in turn, run
// by run and request by request, so that other load on the machine
// weighs on each alike.

const (
	sitePort     = 8000     // the server's port in the sandbox
	bigFile      = 64 << 20 // downloaded whole
	smallFile    = 1 << 10  // requested again and again
	downloadRuns = 10
	getRuns      = 500
	// siteDir is the server's directory in the sandbox: its /tmp is a
	// tmpfs, as is the testbed's, where the direct server's files are.
	siteDir = "/tmp/bench-site"
	// python is the same interpreter in the sandbox and out, whatever the
	// bench's PATH (a pyenv shim may come first).
	python = "/usr/bin/python3"
)

// route is one way to the server: its client, and the URL of its files.
type route struct {
	name   string
	client *http.Client
	base   string // "http://host:port"
}

// benchPorts starts a server in sandbox id, exposes its port, starts the
// same server outside, and adds the rows of downloads and requests
// through each route.
func benchPorts(ctx context.Context, d *daemon, t *table, n int, id string) (err error) {
	script := fmt.Sprintf("mkdir -p %[1]s && head -c %[2]d /dev/urandom > %[1]s/big && head -c %[3]d /dev/urandom > %[1]s/small",
		siteDir, bigFile, smallFile)
	if _, err := d.runToEnd(ctx, id, "sh", "-c", script); err != nil {
		return fmt.Errorf("making the server's files: %w", err)
	}
	server, err := d.spawn(ctx, id, python, "-m", "http.server", fmt.Sprint(sitePort), "--bind", "127.0.0.1", "--directory", siteDir)
	if err != nil {
		return fmt.Errorf("starting the server: %w", err)
	}
	defer func() {
		err = errors.Join(err, d.killAll(context.WithoutCancel(ctx), id, []string{server}))
	}()

	// The unix socket alone, then again with a TCP port: the socket
	// comes back at the same path.
	path, err := d.exposePort(ctx, id, false)
	if err != nil {
		return err
	}
	if err := d.call(ctx, id, sandboxd1.MethodClosePort, []any{uint16(sitePort)}); err != nil {
		return err
	}
	addr, err := d.exposePort(ctx, id, true)
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(addr) {
		return fmt.Errorf("ExposePort with TCP gave %q, not 127.0.0.1:N", addr)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("the exposed port's socket %s, after ExposePort with TCP: %v", path, err)
	}

	directAddr, stop, err := directServer(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()

	routes := []route{
		{"direct", httpClient("tcp", directAddr), "http://" + directAddr},
		{"unix", httpClient("unix", path), "http://localhost"},
		{"tcp", httpClient("tcp", addr), "http://" + addr},
	}
	for _, r := range routes[1:] { // the direct one answers already
		if err := waitAnswers(ctx, r, nil); err != nil {
			out, _, _, _ := d.readLog(context.WithoutCancel(ctx), id, server, 0, logBytes)
			return fmt.Errorf("through the exposed port (%s): %w; the server's log: %q", r.name, err, out)
		}
	}
	downloads, err := interleave(ctx, routes, downloadRuns, "/big", bigFile)
	if err != nil {
		return err
	}
	gets, err := interleave(ctx, routes, getRuns, "/small", smallFile)
	if err != nil {
		return err
	}
	progress("ports: %d downloads and %d requests through each of %d routes", downloadRuns, getRuns, len(routes))
	addPortRows(t, n, downloads, gets, tcpTableLines())
	return nil
}

// tcpTableLines is how many sockets /proc/net/tcp lists now (in the
// testbed's network namespace, the daemon's): the daemon reads that table
// for each connection to a TCP port, and the closed connections of the
// runs wait there (TIME_WAIT) for a minute.
func tcpTableLines() int {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	return max(bytes.Count(data, []byte("\n"))-1, 0) // the first line is a heading
}

// addPortRows adds a row of downloads and one of requests for each
// route, direct first, the others against it; sockets is the length of
// the TCP table after the requests.
func addPortRows(t *table, n int, downloads, gets []series, sockets int) {
	how := []string{
		"from `python3 -m http.server` run by the bench outside any sandbox, over a direct loopback TCP connection (the baseline)",
		"from the same server in the sandbox (`Spawn`), through the exposed port's unix socket (`ExposePort`)",
		"from the same server in the sandbox, through the exposed port's loopback TCP address (`ExposePort` with `TCP`)",
	}
	direct := downloads[0].median()
	for i, s := range downloads {
		r := row{fs: "btrfs", files: n, s: s,
			op: fmt.Sprintf("download of a %d MiB file %s: %s", bigFile>>20, how[i], mbps(bigFile, s.median()))}
		if i > 0 {
			r.ratio = ratio(s.median(), direct)
			r.verdict = fmt.Sprintf("no target; ×%.2f the direct connection's MB/s", float64(direct)/float64(s.median()))
		}
		t.add(r)
	}
	directRate := rate(gets[0])
	for i, s := range gets {
		// Whether a request gets slower as closed connections pile up in
		// the TCP table: the medians of the first and last tenth.
		k := max(1, len(s)/10)
		r := row{fs: "btrfs", files: n, s: s,
			op: fmt.Sprintf("%d GETs of a %d KiB file, each on a new connection (HTTP/1.0), one after another, %s: %.0f requests/s; requests 1-%d: %s ms, %d-%d: %s ms",
				len(s), smallFile>>10, how[i], rate(s), k, ms(s[:k].median()), len(s)-k+1, len(s), ms(s[len(s)-k:].median()))}
		if i == 2 {
			r.op += fmt.Sprintf("; /proc/net/tcp listed %d sockets after the last", sockets)
		}
		if i > 0 {
			r.ratio = ratio(s.median(), gets[0].median())
			r.verdict = fmt.Sprintf("no target; ×%.2f the direct connection's requests/s", rate(s)/directRate)
		}
		t.add(r)
	}
}

// rate is the requests per second of a series of requests one after
// another.
func rate(s series) float64 {
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	if sum <= 0 {
		return 0
	}
	return float64(len(s)) / sum.Seconds()
}

// exposePort exposes sitePort of sandbox id, with a TCP port or not, and
// returns where.
func (d *daemon) exposePort(ctx context.Context, id string, tcp bool) (string, error) {
	opts := map[string]dbus.Variant{}
	if tcp {
		opts[sandboxd1.OptTCP] = dbus.MakeVariant(true)
	}
	var addr string
	err := d.call(ctx, id, sandboxd1.MethodExposePort, []any{uint16(sitePort), opts}, &addr)
	return addr, err
}

// httpClient is a client that reaches addr (a TCP address or a unix
// socket's path, by network) whatever the URL's host, with a new
// connection for each request.
func httpClient(network, addr string) *http.Client {
	var dialer net.Dialer
	return &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr)
			},
			DisableKeepAlives:  true,
			DisableCompression: true,
		},
	}
}

// get fetches path through r and checks that it has size bytes.
func get(ctx context.Context, r route, path string, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s (%s): %w", path, r.name, err)
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s (%s): reading the body: %w", path, r.name, err)
	}
	if resp.StatusCode != http.StatusOK || got != size {
		return fmt.Errorf("GET %s (%s): %s, %d bytes; want 200 OK and %d", path, r.name, resp.Status, got, size)
	}
	return nil
}

// waitAnswers waits until the server answers through r: it may not
// listen yet, and a port connects to nothing until it does. exited, if
// not nil, tells that the server has ended.
func waitAnswers(ctx context.Context, r route, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := get(ctx, r, "/small", smallFile)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the server does not answer after 20s: %w", err)
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("the server ended (%v) before it answered: %w", werr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// interleave fetches path runs times through each route, after one
// untimed fetch through each, the routes in turn, and returns each
// route's times.
func interleave(ctx context.Context, routes []route, runs int, path string, size int64) ([]series, error) {
	times := make([]series, len(routes))
	for run := -1; run < runs; run++ {
		for i, r := range routes {
			dt, err := timed(func() error { return get(ctx, r, path, size) })
			if err != nil {
				return nil, err
			}
			if run >= 0 {
				times[i] = append(times[i], dt)
			}
		}
	}
	return times, nil
}

// directServer starts the server outside any sandbox, on a free loopback
// port, serving files of the same sizes made the same way, and returns
// its address and what stops it and removes its files.
func directServer(ctx context.Context) (addr string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "bench-site-")
	if err != nil {
		return "", nil, fmt.Errorf("making the direct server's directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	for name, size := range map[string]int64{"big": bigFile, "small": smallFile} {
		if err := randomFile(filepath.Join(dir, name), size); err != nil {
			return "", nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("finding a free port: %w", err)
	}
	addr = l.Addr().String()
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// Its log goes to a file of the same tmpfs, as the sandbox's server's
	// goes to its log.
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return "", nil, fmt.Errorf("making the direct server's log: %w", err)
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, python, "-m", "http.server", port, "--bind", "127.0.0.1", "--directory", dir)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting the direct server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		_ = cmd.Process.Kill()
		<-exited // killed: its status says so
		return os.RemoveAll(dir)
	}
	if err := waitAnswers(ctx, route{"direct", httpClient("tcp", addr), "http://" + addr}, exited); err != nil {
		text, _ := os.ReadFile(log.Name())
		return "", nil, errors.Join(fmt.Errorf("the direct server: %w; its output: %q", err, text), stop())
	}
	return addr, stop, nil
}

func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("making %s: %w", path, err)
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
