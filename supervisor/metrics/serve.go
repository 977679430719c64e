package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandboxd/internal/randid"
)

// UnixPrefix marks a listen address that is a unix socket's path.
const UnixPrefix = "unix:"

// ErrNotLocal: a listen address that is neither a unix socket nor a
// loopback IP address. An owner's uid and usage are not for the network:
// a Prometheus elsewhere scrapes through an agent on the host.
var ErrNotLocal = errors.New("not a unix socket nor a loopback address")

// SocketMode is the unix socket's mode: root's, and its group's if one
// is given (root's own otherwise).
const SocketMode = 0o660

// CheckListen checks a listen address: "unix:/absolute/path", or
// IP:port with a loopback IP (127.0.0.0/8, [::1]); a host name is
// refused (it may resolve to anything).
func CheckListen(addr string) error {
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return fmt.Errorf("unix socket %q: want an absolute, clean path", path)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want unix:/path or IP:port: %w", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("%q: port %q is not a port number", addr, port)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: %w (want 127.0.0.1:PORT, [::1]:PORT or unix:/path)", addr, ErrNotLocal)
	}
	return nil
}

// Server serves the metrics until Close.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	path string // the unix socket's, removed on Close
	done chan error
}

// Serve listens on addr (CheckListen's forms; a unix socket gets mode
// SocketMode, owned by root and group gid, or root's group with gid < 0)
// and serves the metrics at /metrics (and /) in a goroutine of its own.
func (m *Metrics) Serve(addr string, gid int, log *slog.Logger) (*Server, error) {
	if err := CheckListen(addr); err != nil {
		return nil, fmt.Errorf("serving the metrics: %w", err)
	}
	s := &Server{done: make(chan error, 1)}
	var err error
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		s.ln, err = listenUnix(path, gid)
		s.path = path
	} else {
		s.ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("serving the metrics on %s: %w", addr, err)
	}
	h := promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	mux.Handle("/{$}", h)
	s.srv = &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
	}
	go func() { s.done <- s.srv.Serve(s.ln) }()
	log.Info("serving the metrics", "listen", addr)
	return s, nil
}

// Addr is where s listens (a TCP port of 0 is chosen by the kernel).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving: the scrapes under way get a few seconds, and the
// unix socket is removed.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if s.path != "" {
		if rerr := removeSocket(s.path); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// listenUnix makes the socket at path safely: its directory must be a
// directory (not a link) that only root may write, so that no one else
// can plant anything there; a socket found at path (a stale one, left by
// a crash) is replaced, anything else refused. The socket is made under
// a temporary name, given its mode and owner, then renamed into place:
// no one connects before its mode is set.
func listenUnix(path string, gid int) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := safeDir(dir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("%s is there and is not a socket (%s): refusing to replace it", path, fi.Mode().Type())
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	tmp := filepath.Join(dir, "."+filepath.Base(path)+"."+randid.Hex(6))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // it is renamed: Close removes path
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, 0); err != nil { // nothing until it is owned
		return fail(err)
	}
	group := os.Getegid()
	if gid >= 0 {
		group = gid
	}
	if err := os.Lchown(tmp, os.Geteuid(), group); err != nil {
		return fail(err)
	}
	if err := os.Chmod(tmp, SocketMode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return ln, nil
}

// safeDir checks that dir is a directory owned by root that no one else
// may write (no link in its place).
func safeDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("the socket's directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("the socket's directory %s is not a directory (%s)", dir, fi.Mode().Type())
	case !ok || st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("the socket's directory %s is not owned by uid %d: another user could put something in its place", dir, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the socket's directory %s may be written by others (mode %v): another user could put something in its place", dir, fi.Mode().Perm())
	}
	return nil
}

// removeSocket removes path if it is a socket.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return nil
	}
	return os.Remove(path)
}
