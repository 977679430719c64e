package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/client"
)

// connect is a Client for one test, closed at its end.
func connect(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newSandbox makes a sandbox of "web" for one test, destroyed at its end.
func newSandbox(t *testing.T, c *client.Client, opts client.CreateOptions) *client.Sandbox {
	t.Helper()
	sb, err := c.Create(context.Background(), "web", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroying the test's sandbox: %v", err)
		}
	})
	return sb
}

// errorName is the D-Bus error name err carries, for messages.
func errorName(err error) string {
	var derr *client.Error
	if errors.As(err, &derr) {
		return derr.Name
	}
	return "no D-Bus error"
}
