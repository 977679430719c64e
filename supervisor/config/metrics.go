package config

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// metrics checks [metrics]: listen is off, a unix socket, or a loopback
// IP address and port; never an address other hosts reach.
func (v *validator) metrics(c *Config) {
	m := c.Metrics
	line := v.w.line("metrics", "listen")
	switch path, unix := strings.CutPrefix(m.Listen, "unix:"); {
	case m.Listen == "":
	case unix:
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			v.add(line, "metrics.listen", nil, "metrics.listen = %q: a unix socket wants an absolute, clean path, like \"unix:/run/sandboxd/metrics.sock\"", m.Listen)
		}
	default:
		host, port, err := net.SplitHostPort(m.Listen)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
			v.add(line, "metrics.listen", nil, "metrics.listen = %q: want \"unix:/path\" or a loopback IP and port, like \"127.0.0.1:9477\"", m.Listen)
			break
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			v.add(line, "metrics.listen", nil, "metrics.listen = %q is not a loopback address: the metrics name owners (uids) and their usage, which are not for the network; "+
				"listen on \"127.0.0.1:PORT\" or a unix socket and scrape through an agent on this host (a host name is refused too: it may resolve to anything)", m.Listen)
		}
	}
	if m.Group != "" {
		if !accountName.MatchString(m.Group) {
			v.add(v.w.line("metrics", "group"), "metrics.group", nil, "metrics.group = %q is not a group name or a numeric id", m.Group)
		} else if !strings.HasPrefix(m.Listen, "unix:") {
			v.add(v.w.line("metrics", "group"), "metrics.group", nil, "metrics.group = %q: only a unix socket has a group (metrics.listen = %q)", m.Group, m.Listen)
		}
	}
}
