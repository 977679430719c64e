package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// A tool error keeps the daemon's words and adds what to do, by kind.
func TestToolErrorsSayWhatToDo(t *testing.T) {
	daemon := func(name, msg string) error {
		return &client.Error{Op: "reading x in sandbox web-1", Name: name, Message: msg}
	}
	for _, tc := range []struct {
		err        error
		want, hint string
	}{
		{daemon(sandboxd1.ErrorNoSuchFile, "no such file"), "reading x in sandbox web-1: no such file", "file_list"},
		{daemon(sandboxd1.ErrorAccessDenied, "open x: permission denied"), "permission denied", "owner and mode"},
		{daemon(sandboxd1.ErrorAccessDenied, "may not use project web"), "may not use project", "access rules"},
		{daemon(sandboxd1.ErrorConflict, "paths changed: a, b"), "a, b", "rebase"},
		{daemon(sandboxd1.ErrorStopped, "sandbox web-1 is stopped"), "is stopped", "start it with sandbox_start"},
		{fmt.Errorf("reading x: larger than 5 bytes: %w", client.ErrTooLarge), "larger than 5", "in parts"},
		{invalidf("mode %q is bad", "x"), `mode "x" is bad`, ""},
		{fmt.Errorf("running sleep: %w", context.Canceled), "running sleep", "was cancelled"},
	} {
		got := toolError(tc.err).Error()
		if !strings.Contains(got, tc.want) || !strings.Contains(got, tc.hint) {
			t.Errorf("toolError(%v) = %q; want %q and a hint with %q", tc.err, got, tc.want, tc.hint)
		}
		if !errors.Is(toolError(tc.err), tc.err) && !errors.Is(toolError(tc.err), errors.Unwrap(tc.err)) {
			t.Errorf("toolError(%v) does not wrap it", tc.err)
		}
	}
	if !errors.Is(invalidf("x"), client.ErrInvalidArgs) {
		t.Error("the server's own bad-input error is not ErrInvalidArgs")
	}
}
