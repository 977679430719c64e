package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

func TestAServerSpawnedInASandboxAnswersOnItsExposedPort(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	if _, err := sb.Exec(ctx, []string{"mkdir", "/tmp/site"}, client.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "/tmp/site/hello.txt", []byte("hello from the sandbox\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	proc, err := sb.Spawn(ctx, []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, client.ExecOptions{Dir: "/tmp/site"})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := sb.ExposePort(ctx, 8000, client.ExposeOptions{TCP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ExposePort(ctx, 8000, client.ExposeOptions{}); !errors.Is(err, client.ErrExists) {
		t.Errorf("exposing the port again: %v; want ErrExists", err)
	}
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/hello.txt")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(b); resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			data, _, _, _ := sb.ReadLog(ctx, proc, 0, 0)
			t.Fatalf("the server does not answer on %s after 20s: %v %q; its log:\n%s", addr, err, body, data)
		}
	}
	if body != "hello from the sandbox\n" {
		t.Errorf("GET /hello.txt through %s: %q", addr, body)
	}
	if err := sb.ClosePort(ctx, 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/hello.txt"); err == nil {
		t.Errorf("%s still answers once the port is closed", addr)
	}
	// The server ran as a background process: its end is seen.
	if err := sb.SignalProcess(ctx, proc, 15); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := sb.WaitProcess(waitCtx, proc)
	if err != nil || p.How != client.HowSignaled || p.Signal != 15 || !strings.Contains(strings.Join(p.Argv, " "), "http.server") {
		t.Errorf("the server after SIGTERM: %+v, %v; want it signaled (15)", p, err)
	}
}
