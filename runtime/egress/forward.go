package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// forward sends req, a plain HTTP request, over up, the connection open
// to target, and streams the response back to c.
func (p *Proxy) forward(ctx context.Context, c net.Conn, req *http.Request, target string, up net.Conn) {
	conns := make(chan net.Conn, 1)
	conns <- up
	tr := &http.Transport{
		Proxy: nil,
		// Only the connection made to the address checked: never a
		// second one, and no lookup of the URL's host.
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			select {
			case c := <-conns:
				return c, nil
			default:
				return nil, errors.New("the connection to the origin was lost")
			}
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
		// An origin's header is held whole while it is read: bounded
		// as the sandbox's is, not by the default 1 MiB.
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	defer tr.CloseIdleConnections()

	out := req.Clone(ctx)
	out.RequestURI = ""
	out.Host = req.URL.Host // the host checked, whatever the client said
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // send none rather than Go's
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		p.log().Warn("egress failed", "SANDBOX_ID", p.Sandbox, "target", target, "ACTION", "connect", "method", req.Method, "error", err)
		reply(c, http.StatusBadGateway, fmt.Sprintf("forwarding to %s: %v", target, err))
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Close = true
	resp.Write(c)
}

// hostHeader returns the value of the Host header in head, the raw bytes
// of a request (and perhaps what follows it), "" if there is none; ok is
// false when there are several.
func hostHeader(head []byte) (host string, ok bool) {
	// HTTP/1 parsers also take a bare LF as a line's end.
	text := strings.ReplaceAll(string(head), "\r\n", "\n")
	if end := strings.Index(text, "\n\n"); end >= 0 {
		text = text[:end]
	}
	lines := strings.Split(text, "\n")
	n := 0
	for _, l := range lines[min(1, len(lines)):] {
		name, value, found := strings.Cut(l, ":")
		if found && strings.EqualFold(strings.TrimSpace(name), "Host") {
			host = strings.TrimSpace(value)
			n++
		}
	}
	return host, n <= 1
}

// sameHost reports whether two HOST[:PORT] of plain HTTP name the same
// place: names compared without case and a trailing dot, port 80 the
// default.
func sameHost(a, b string) bool {
	norm := func(h string) string {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, ""
		}
		if port == "" {
			port = "80"
		}
		host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
		return net.JoinHostPort(host, port)
	}
	return norm(a) == norm(b)
}

// hopHeaders concern one connection, not the request: a proxy drops them.
var hopHeaders = []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Proxy-") {
			delete(h, name)
		}
	}
}
