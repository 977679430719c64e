package client_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// WireOptions are what Exec sends, for callers that make the call
// themselves (sandboxctl's exec and shell): each option set under its
// D-Bus name and type, none that is not set, and a timeout shorter than
// the bus's microsecond still a timeout.
func TestWireOptionsAreExecsOptionsOnTheBus(t *testing.T) {
	if got := (client.ExecOptions{}).WireOptions(); len(got) != 0 {
		t.Errorf("the zero ExecOptions on the bus: %v; want no options", got)
	}
	got := client.ExecOptions{Env: []string{"A=1"}, Dir: "/tmp", Root: true, Timeout: 500 * time.Nanosecond,
		OutputLimit: 10 * sandboxd1.MiB, Detach: true}.WireOptions()
	want := map[string]any{
		sandboxd1.OptEnvironment:      []string{"A=1"},
		sandboxd1.OptWorkingDirectory: "/tmp",
		sandboxd1.OptRoot:             true,
		sandboxd1.OptTimeoutUSec:      uint64(1),
		sandboxd1.OptOutputLimit:      uint64(10 << 20),
		sandboxd1.OptDetach:           true,
	}
	if len(got) != len(want) {
		t.Errorf("WireOptions: %v; want %v", got, want)
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || !reflect.DeepEqual(v, dbus.MakeVariant(w)) {
			t.Errorf("WireOptions' %s: %v (present: %v); want %v", name, v, ok, dbus.MakeVariant(w))
		}
	}
}

// Fork, Stop, Start, and Spawn with Restart, as sent: each its method on
// the sandbox's object under its signature, only the options set, and
// the reply read back; a Stopped error is ErrStopped.
func TestUnitForkStopStartSpawnOnTheWire(t *testing.T) {
	ctx := context.Background()
	c, calls := fakePeer(t, func(call sent) ([]any, string) {
		switch call.member {
		case sandboxd1.MethodFork:
			return []any{[]string{"0a1b2c3d4e5f", "1a1b2c3d4e5f"}, []string{"python3 -m http.server"}}, ""
		case sandboxd1.MethodSpawn:
			if argv, _ := call.body[0].([]string); len(argv) > 0 && argv[0] == "refused" {
				return []any{"sandbox is stopped: start it with sandboxctl start S"}, sandboxd1.ErrorStopped
			}
			return []any{"p1"}, ""
		}
		return nil, ""
	})
	sb := c.Handle(sandboxd1.ListEntry{ID: "7a28fd100edf", Project: "web"})
	path := sandboxd1.SandboxPath(sb.ID())
	next := func(member, signature string) sent {
		t.Helper()
		call := <-calls
		if call.path != path || call.iface != sandboxd1.SandboxInterface || call.member != member || call.signature != signature {
			t.Errorf("sent %s.%s(%s) on %s; want %s.%s(%s) on %s", call.iface, call.member, call.signature, call.path,
				sandboxd1.SandboxInterface, member, signature, path)
		}
		return call
	}

	r, err := sb.Fork(ctx, client.ForkOptions{Count: 2, Names: []string{"a", ""}, Spawn: [][]string{{"make", "serve"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, client.ForkResult{IDs: []string{"0a1b2c3d4e5f", "1a1b2c3d4e5f"}, NotCarried: []string{"python3 -m http.server"}}) {
		t.Errorf("Fork's result: %+v", r)
	}
	call := next(sandboxd1.MethodFork, "a{sv}")
	wantOptions(t, "Fork", call.body, map[string]any{
		sandboxd1.OptCount: uint32(2), sandboxd1.OptNames: []string{"a", ""}, sandboxd1.OptSpawn: [][]string{{"make", "serve"}},
	})
	if _, err := sb.Fork(ctx, client.ForkOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOptions(t, "Fork with no options", next(sandboxd1.MethodFork, "a{sv}").body, map[string]any{})
	if _, err := sb.Fork(ctx, client.ForkOptions{Count: -1}); !errors.Is(err, client.ErrInvalidArgs) {
		t.Errorf("Fork of count -1: %v; want ErrInvalidArgs", err)
	}

	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	next(sandboxd1.MethodStop, "")
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	next(sandboxd1.MethodStart, "")

	if _, err := sb.Spawn(ctx, []string{"sleep", "9"}, client.ExecOptions{Restart: true, Dir: "/tmp"}); err != nil {
		t.Fatal(err)
	}
	call = next(sandboxd1.MethodSpawn, "asa{sv}")
	wantOptions(t, "Spawn with Restart", call.body[1:], map[string]any{sandboxd1.OptRestart: true, sandboxd1.OptWorkingDirectory: "/tmp"})
	if _, err := sb.Spawn(ctx, []string{"sleep", "9"}, client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOptions(t, "Spawn without Restart", next(sandboxd1.MethodSpawn, "asa{sv}").body[1:], map[string]any{})

	_, err = sb.Spawn(ctx, []string{"refused"}, client.ExecOptions{})
	if !errors.Is(err, client.ErrStopped) || !strings.Contains(err.Error(), "sandboxctl start") {
		t.Errorf("Spawn in a stopped sandbox: %v (%s); want ErrStopped with the daemon's words", err, errorName(err))
	}
}

// wantOptions checks that body is one a{sv} of exactly want.
func wantOptions(t *testing.T, what string, body []any, want map[string]any) {
	t.Helper()
	if len(body) != 1 {
		t.Fatalf("%s sent %d arguments for its options; want 1", what, len(body))
	}
	got, ok := body[0].(map[string]dbus.Variant)
	if !ok {
		t.Fatalf("%s's options are a %T; want a{sv}", what, body[0])
	}
	if len(got) != len(want) {
		t.Errorf("%s's options: %v; want %v", what, got, want)
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || !reflect.DeepEqual(v.Value(), w) {
			t.Errorf("%s's %s: %v (present: %v); want %#v", what, name, v, ok, w)
		}
	}
}
