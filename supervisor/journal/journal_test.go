package journal

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A command's arguments may hold a secret: the log shows its program and
// size only, however the argv reaches it (a record's attribute, a
// logger's, a list); other attributes are kept whole (the control).
func TestArgvIsShortenedToItsProgram(t *testing.T) {
	const secret = "hunter2-TOKEN"
	var buf bytes.Buffer
	log := slog.New(NewHandler(&buf, slog.LevelInfo)) // a test's stderr is no journal: the text handler
	log.Info("command started", "argv", "curl -H Authorization:"+secret+" https://example.invalid", "other", "kept-"+secret)
	log.With("argv", "sh -c "+secret).Info("command ended")
	log.Info("listed", "argv", []string{"mysql", "-p" + secret})
	out := buf.String()
	if strings.Count(out, secret) != 1 || !strings.Contains(out, "other=kept-"+secret) {
		t.Errorf("the log shows the secret of an argv, or lost another attribute:\n%s", out)
	}
	for _, want := range []string{`argv="curl (59 bytes)"`, `argv="sh (19 bytes)"`, `argv="mysql (21 bytes)"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	// The journal handler's fields go through the same.
	if a := redact(slog.String("G_argv", "sh -c "+secret)); a.Value.String() != "sh (19 bytes)" {
		t.Errorf("redact of a grouped argv = %v", a)
	}
}
