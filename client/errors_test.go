package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

func TestASandboxThatIsGoneIsNoSuchSandbox(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	if _, err := c.Sandbox(ctx, "0123456789ab"); !errors.Is(err, client.ErrNoSuchSandbox) {
		t.Errorf("Sandbox of an id nobody has: %v; want ErrNoSuchSandbox", err)
	}
	sb, err := c.Create(ctx, "web", client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	// The handle outlives the sandbox: the daemon's own answer.
	_, err = sb.Status(ctx)
	var derr *client.Error
	if !errors.Is(err, client.ErrNoSuchSandbox) || !errors.As(err, &derr) {
		t.Fatalf("Status of a destroyed sandbox: %v; want ErrNoSuchSandbox", err)
	}
	if derr.Name != sandboxd1.ErrorNoSuchSandbox || !strings.Contains(derr.Message, sb.ID()) {
		t.Errorf("the error is %s %q; want %s in the daemon's words, naming %s", derr.Name, derr.Message, sandboxd1.ErrorNoSuchSandbox, sb.ID())
	}
	if errors.Is(err, client.ErrAccessDenied) || errors.Is(err, client.ErrFailed) {
		t.Errorf("%v matches other sentinels too", err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}, client.ExecOptions{}); !errors.Is(err, client.ErrNoSuchSandbox) {
		t.Errorf("Exec in a destroyed sandbox: %v; want ErrNoSuchSandbox", err)
	}
	if err := sb.Destroy(ctx); !errors.Is(err, client.ErrNoSuchSandbox) {
		t.Errorf("Destroy of a destroyed sandbox: %v; want ErrNoSuchSandbox", err)
	}
}

func TestCreateErrorsMatchTheirSentinels(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	newSandbox(t, c, client.CreateOptions{Name: "taken"})
	for _, tc := range []struct {
		name     string
		project  string
		opts     client.CreateOptions
		sentinel error
		says     string
	}{
		{"an unknown project", "nope", client.CreateOptions{}, client.ErrNoSuchProject, "nope"},
		{"a name taken", "web", client.CreateOptions{Name: "taken"}, client.ErrExists, `"taken"`},
		{"too little memory", "web", client.CreateOptions{MemoryMax: sandboxd1.MiB}, client.ErrInvalidArgs, "MemoryMax"},
		{"an unknown network", "web", client.CreateOptions{Network: "everywhere"}, client.ErrInvalidArgs, "everywhere"},
	} {
		sb, err := c.Create(ctx, tc.project, tc.opts)
		if err == nil {
			sb.Destroy(ctx)
			t.Errorf("%s: made sandbox %s", tc.name, sb.ID())
			continue
		}
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v, saying %s", tc.name, err, tc.sentinel, tc.says)
		}
	}
}

func TestASandboxIsFoundByAPrefixOfItsIDThatIsItsAlone(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	if _, err := c.Sandbox(ctx, ""); !errors.Is(err, client.ErrInvalidArgs) {
		t.Errorf("Sandbox(\"\"): %v; want ErrInvalidArgs", err)
	}
	// Ids are hex: of 17 sandboxes two share a first digit; mostly far
	// fewer are needed.
	byDigit := map[byte]string{}
	var a, b string
	for range 17 {
		id := newSandbox(t, c, client.CreateOptions{}).ID()
		if other, ok := byDigit[id[0]]; ok {
			a, b = other, id
			break
		}
		byDigit[id[0]] = id
	}
	_, err := c.Sandbox(ctx, a[:1])
	if !errors.Is(err, client.ErrInvalidArgs) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Errorf("Sandbox(%q), the start of %s and %s: %v; want ErrInvalidArgs naming both", a[:1], a, b, err)
	}
	for _, id := range []string{a, b} {
		if sb, err := c.Sandbox(ctx, id[:len(id)-1]); err != nil || sb.ID() != id {
			t.Errorf("Sandbox(%q): %v, %v; want %s", id[:len(id)-1], sb, err, id)
		}
	}
}

// A name that is also the start of another sandbox's id finds neither:
// the user meant one of two, and a command must not go to the wrong one.
func TestANameLikeTheStartOfAnotherIDIsAmbiguous(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	a := newSandbox(t, c, client.CreateOptions{})
	b := newSandbox(t, c, client.CreateOptions{Name: a.ID()[:3]})
	_, err := c.Sandbox(ctx, a.ID()[:3])
	if !errors.Is(err, client.ErrInvalidArgs) || !strings.Contains(err.Error(), a.ID()) || !strings.Contains(err.Error(), b.ID()) {
		t.Errorf("Sandbox(%q), %s's name and the start of %s: %v; want ErrInvalidArgs naming both", a.ID()[:3], b.ID(), a.ID(), err)
	}
	for _, sb := range []*client.Sandbox{a, b} {
		if got, err := c.Sandbox(ctx, sb.ID()); err != nil || got.ID() != sb.ID() {
			t.Errorf("Sandbox(%s): %v, %v; want it, by its id", sb.ID(), got, err)
		}
	}
}

// What a caller types reaches the daemon's lookup as it is: a name with a
// line break or a terminal escape comes back quoted in the error, never
// raw, and an argument longer than any name is refused as such.
func TestFindSandboxQuotesWhatItWasGiven(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	_, err := c.Sandbox(ctx, "a\nb\x1b]0;owned\a")
	if !errors.Is(err, client.ErrNoSuchSandbox) {
		t.Fatalf("Sandbox of a name with a newline and an escape: %v; want ErrNoSuchSandbox", err)
	}
	if strings.ContainsAny(err.Error(), "\n\x1b\a") {
		t.Errorf("the error carries the argument raw: %q", err.Error())
	}
	if _, err := c.Sandbox(ctx, strings.Repeat("a", 300)); !errors.Is(err, client.ErrInvalidArgs) || !strings.Contains(err.Error(), "256") {
		t.Errorf("Sandbox of 300 bytes: %v; want ErrInvalidArgs naming the bound", err)
	}
}
