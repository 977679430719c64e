package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

func ExampleClient_Create() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	sb, err := c.Create(ctx, "web", client.CreateOptions{
		Name:      "example-create",
		MemoryMax: 512 * sandboxd1.MiB,
		TTL:       time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	st, err := sb.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Name, st.Project, st.State, st.Network, st.Limits.MemoryMax)
	fmt.Println("expires within the hour:", time.Until(st.Expires) <= time.Hour)
	// Output:
	// example-create web ready none 512MiB
	// expires within the hour: true
}

func ExampleClient_Sandbox() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	made, err := c.Create(ctx, "web", client.CreateOptions{Name: "example-find"})
	if err != nil {
		log.Fatal(err)
	}
	defer made.Destroy(ctx)

	// By name, by id, or by a prefix of the id that no other has.
	sb, err := c.Sandbox(ctx, "example-find")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sb.Name(), sb.ID() == made.ID())

	_, err = c.Sandbox(ctx, "no-such-sandbox")
	fmt.Println(errors.Is(err, client.ErrNoSuchSandbox))
	fmt.Println(err)
	// Output:
	// example-find true
	// true
	// finding sandbox "no-such-sandbox": no sandbox is called or starts with "no-such-sandbox"
}

func ExampleSandbox_Exec() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	// The command writes to this process's stdout itself: an *os.File
	// is handed over as it is.
	st, err := sb.Exec(ctx, []string{"cat", "index.html"}, client.ExecOptions{Stdout: os.Stdout})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Success())

	// Any io.Reader and io.Writer do, through pipes; a failing command
	// is no error, its status says how it ended.
	var out strings.Builder
	st, err = sb.Exec(ctx, []string{"sh", "-c", "tr a-z A-Z; exit 3"}, client.ExecOptions{
		Stdin:  strings.NewReader("shout\n"),
		Stdout: &out,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(out.String())
	fmt.Println(st)
	// Output:
	// <h1>web</h1>
	// true
	// SHOUT
	// exit status 3
}

func ExampleSandbox_Output() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	stdout, stderr, st, err := sb.Output(ctx, []string{"sh", "-c", "echo $GREETING; echo oops >&2; pwd"}, client.ExecOptions{
		Env: []string{"GREETING=hello"},
		Dir: "/tmp",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q %q %s\n", stdout, stderr, st)

	_, _, st, err = sb.Output(ctx, []string{"sleep", "10"}, client.ExecOptions{Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.How)
	// Output:
	// "hello\n/tmp\n" "oops\n" exit status 0
	// timed-out
}

func ExampleSandbox_Spawn() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	// It runs on without this program; its output goes to a log.
	proc, err := sb.Spawn(ctx, []string{"sh", "-c", "echo working; sleep 0.2; echo done; exit 4"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	p, err := sb.WaitProcess(ctx, proc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.How, p.Status)
	var logText []byte
	for offset := uint64(0); ; {
		data, next, ended, err := sb.ReadLog(ctx, proc, offset, 0)
		if err != nil {
			log.Fatal(err)
		}
		logText, offset = append(logText, data...), next
		if ended {
			break
		}
	}
	fmt.Print(string(logText))
	// Output:
	// exited 4
	// working
	// done
}

func ExampleSandbox_Eval() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	session, err := sb.OpenSession(ctx, "sh", client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.CloseSession(ctx, session)
	if _, _, err := sb.Eval(ctx, session, "answer=41"); err != nil {
		log.Fatal(err)
	}
	// The session keeps its variables between inputs.
	out, status, err := sb.Eval(ctx, session, "echo $((answer + 1))")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q %d\n", out, status)
	// Output: "42\n" 0
}
