// Package egress is the network policy "allowlist": a filtering HTTP proxy
// that is a sandbox's only way out.
//
// A sandbox's network namespace has only lo. The daemon opens a listening
// socket inside that namespace (ListenInNetNS, 127.0.0.1:3128 there) and
// serves a Proxy on it from the host side; the sandbox is given
// HTTP_PROXY and HTTPS_PROXY pointing there. The proxy lets through CONNECT
// tunnels and plain HTTP requests to the HOST:PORT entries of the sandbox's
// Allowlist, resolves names itself (the sandbox has no DNS), dials exactly
// the addresses it checked, and logs every connection it allows or refuses.
package egress
