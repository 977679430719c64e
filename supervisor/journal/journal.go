// Package journal is a log/slog handler that writes to the systemd journal
// with each attribute as a journal field (SANDBOX_ID=..., CALLER_UID=...),
// so that `journalctl SANDBOX_ID=abc` finds a sandbox's whole history.
// Where there is no journal (a test, a terminal) it writes text to stderr.
package journal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"unicode"

	sdjournal "github.com/coreos/go-systemd/v22/journal"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// NewHandler returns the journal handler when the process's stderr is
// connected to the journal, and a text handler on w otherwise.
//
// Either way an attribute named "argv" (a command line, joined by spaces)
// is shortened to its program and its size: commands' arguments may hold
// secrets (a token, a password), the journal is read by more than root,
// and the whole command line is in the root-only audit log.
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	if ok, _ := sdjournal.StderrIsJournalStream(); ok && sdjournal.Enabled() {
		return &handler{level: level}
	}
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		return redact(a)
	}})
}

// ArgvKey is the attribute that NewHandler's handlers shorten.
const ArgvKey = "argv"

// redact shortens an argv attribute to "PROGRAM (N bytes)".
func redact(a slog.Attr) slog.Attr {
	if a.Key != ArgvKey && !strings.HasSuffix(a.Key, "_"+ArgvKey) {
		return a
	}
	var line string
	switch v := a.Value.Resolve().Any().(type) {
	case []string:
		line = strings.Join(v, " ")
	default:
		line = a.Value.Resolve().String()
	}
	program, _, _ := strings.Cut(line, " ")
	return slog.String(a.Key, fmt.Sprintf("%s (%d bytes)", program, len(line)))
}

type handler struct {
	level  slog.Leveler
	attrs  []slog.Attr
	prefix string // group prefix, FIELD_
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, attrs)...)
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "_"
	return &c
}

func prefixed(prefix string, attrs []slog.Attr) []slog.Attr {
	if prefix == "" {
		return attrs
	}
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	vars := map[string]string{}
	add := func(a slog.Attr) {
		a = redact(a)
		if key := fieldName(a.Key); key != "" {
			vars[key] = a.Value.Resolve().String()
		}
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
		return true
	})
	// The message shows the fields too, for a plain `journalctl -u`.
	// Values carry what sandboxes named (paths, a check's error): escaped,
	// so that none shows as an escape sequence or a line of its own there.
	msg := termsafe.Line(r.Message)
	var extra []string
	for k, v := range vars {
		extra = append(extra, k+"="+termsafe.Line(v))
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		msg += " " + strings.Join(extra, " ")
	}
	if err := sdjournal.Send(msg, priority(r.Level), vars); err != nil {
		return fmt.Errorf("writing to the journal: %w", err)
	}
	return nil
}

// fieldName makes a journal field name: upper case letters, digits and
// '_', not starting with '_' (those are the journal's own).
func fieldName(key string) string {
	var b strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(unicode.ToUpper(r))
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return strings.TrimLeft(b.String(), "_0123456789")
}

func priority(l slog.Level) sdjournal.Priority {
	switch {
	case l >= slog.LevelError:
		return sdjournal.PriErr
	case l >= slog.LevelWarn:
		return sdjournal.PriWarning
	case l >= slog.LevelInfo:
		return sdjournal.PriInfo
	}
	return sdjournal.PriDebug
}
