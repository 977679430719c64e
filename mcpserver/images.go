package mcpserver

import (
	"context"
	"path"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
)

// Images a session made, returned as image content (exec's images are
// read by toolcall.AttachImages): the figures a python3 session's
// matplotlib drew.

// figuresInput starts the control input a python3 session's driver
// answers with the figures it kept (see drivers/python3.py): \x01 starts
// no Python source anyone writes, and D-Bus strings may hold it.
const figuresInput = "\x01sandboxd-figures "

// replFigures adds the figures the input key's python3 session just ran
// drew (plt.show(), or left open) to the call's result. Its driver
// keeps them and, asked by a control input (figuresInput, which no
// Python source starts with), writes them as PNGs to a directory of the
// session's own under the sandbox's /tmp (emptied first) and names
// them; they are read from there as the caller.
func (s *server) replFigures(ctx context.Context, sb *client.Sandbox, key replKey) []string {
	if key.language != "python3" {
		return nil
	}
	s.repl.mu.Lock()
	id := s.repl.open[key].id
	s.repl.mu.Unlock()
	if id == "" || strings.Trim(id, "0123456789abcdefABCDEF-") != "" {
		return nil
	}
	dir := "/tmp/sandboxd-figures-" + id
	listing, status, err := sb.Eval(ctx, id, figuresInput+dir)
	if err != nil || status != 0 || listing == "" {
		return nil // matplotlib drew nothing (or is not there)
	}
	var paths []string
	for _, name := range strings.Split(strings.TrimSpace(listing), "\n") {
		if strings.HasPrefix(name, "figure-") && strings.HasSuffix(name, ".png") && !strings.Contains(name, "/") {
			paths = append(paths, path.Join(dir, name))
		}
	}
	slices.SortFunc(paths, cmpNatural)
	return toolcall.AttachImages(ctx, sb, paths, false, s.opts.MaxFileBytes)
}

// cmpNatural orders figure-2.png before figure-10.png.
func cmpNatural(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
