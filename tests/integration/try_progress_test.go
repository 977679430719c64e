package integration

import (
	"context"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Try's variants told as each is done, through the Go client
// (TryOptions.OnVariant, from the daemon's TryVariantDone): the second
// variant waits for a file the test writes into its sandbox only once
// the first one's result came, so that it can pass only if the first
// was told before Try answered. Another connection on the bus, root's
// even, listening for the signal, hears nothing of it.
func TestTryTellsEachVariantAsItIsDone(t *testing.T) {
	tryProject(t, "try-progress")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a safety net
	defer cancel()
	c, err := sbclient.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A listener of its own, which must hear nothing: the signal goes to
	// the caller alone.
	other, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	heard := make(chan *dbus.Signal, 16)
	other.Signal(heard)
	if err := other.AddMatchSignal(dbus.WithMatchInterface(sandboxd1.ManagerInterface), dbus.WithMatchMember(sandboxd1.SignalTryVariantDone)); err != nil {
		t.Fatal(err)
	}

	told := make(chan sandboxd1.TryVariant, 4)
	type answer struct {
		report *sandboxd1.TryReport
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		r, err := c.Try(ctx, "try-progress",
			[]string{tryWrong, "until [ -e go ]; do sleep 0.05; done; " + tryRight}, "sh check.sh", sandboxd1.KeepNone,
			sbclient.TryOptions{Create: sbclient.CreateOptions{Name: "told"}, Parallel: 2, Timeout: 2 * time.Minute,
				OnVariant: func(v sandboxd1.TryVariant) { told <- v }})
		answered <- answer{r, err}
	}()

	var first sandboxd1.TryVariant
	select {
	case first = <-told:
	case a := <-answered:
		t.Fatalf("Try answered before any variant was told: %+v, %v", a.report, a.err)
	}
	if first.Index != 0 || first.Of != 2 || first.Name != "told-1" || first.ID == "" || first.Passed ||
		first.FailedIn != "check" || first.Result != "fail (check: exit 1)" || first.Seconds <= 0 ||
		first.Changed == nil || *first.Changed != 1 || first.Winner || first.CommandOutput != nil {
		t.Fatalf("the first variant as told: %+v", first)
	}
	// Its sandbox may be made after the first is done.
	var sb *sbclient.Sandbox
	waitFor(t, "the second variant's sandbox", func() bool {
		sb, err = c.Sandbox(ctx, "told-2")
		return err == nil
	})
	if err := sb.WriteFile(ctx, "go", []byte("go\n"), sbclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	var second sandboxd1.TryVariant
	select {
	case second = <-told:
	default:
		t.Fatalf("Try answered before it told the second variant: %+v", a.report)
	}
	if second.Index != 1 || second.Name != "told-2" || !second.Passed || second.Result != "pass" || second.ID != a.report.Results[1].ID {
		t.Fatalf("the second variant as told: %+v; the report's: %+v", second, a.report.Results[1])
	}
	if a.report.Winner != 1 || a.report.Results[0].ID != first.ID || a.report.Results[0].Result != first.Result {
		t.Fatalf("the report %+v against what was told %+v", a.report, first)
	}
	if len(told) != 0 {
		t.Fatalf("a variant told twice: %+v", <-told)
	}

	// The daemon's messages to the other connection come in order: what
	// it sent before its answer to a ping has come by then.
	if err := other.Object(sandboxd1.BusName, sandboxd1.ManagerPath).CallWithContext(ctx, "org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		t.Fatal(err)
	}
	// (The bus's own NameAcquired comes to every connection, whatever
	// its match rules.)
	for {
		select {
		case s := <-heard:
			if s.Name == sandboxd1.ManagerInterface+"."+sandboxd1.SignalTryVariantDone {
				t.Fatalf("another connection heard %s %v", s.Name, s.Body)
			}
			continue
		default:
		}
		break
	}
}
