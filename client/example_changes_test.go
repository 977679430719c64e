package client_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

func ExampleSandbox_Diff() {
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
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "echo hi > hello.txt && echo '<h1>WEB</h1>' > index.html"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}

	changes, err := sb.Diff(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range changes {
		fmt.Println(ch.Kind, ch.Type, ch.Path)
	}
	text, err := sb.UnifiedDiff(ctx, client.UnifiedDiffOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "+<") || strings.HasPrefix(line, "-<") {
			fmt.Print(line)
		}
	}
	// Unordered output:
	// added file hello.txt
	// modified file index.html
	// -<h1>web</h1>
	// +<h1>WEB</h1>
}

func ExampleSandbox_Checkpoint() {
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

	if _, err := sb.Checkpoint(ctx, "before"); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Exec(ctx, []string{"rm", "index.html"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := sb.Rollback(ctx, "before"); err != nil {
		log.Fatal(err)
	}
	stdout, _, _, err := sb.Output(ctx, []string{"cat", "index.html"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(stdout))
	list, err := sb.Checkpoints(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(list), list[0].Name)
	// Output:
	// <h1>web</h1>
	// 1 before
}

func ExampleSandbox_Promote() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "site", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "echo 'made in a sandbox' > NEWS"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}

	p, err := sb.Promote(ctx, client.PromoteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	p, err = c.WaitPromotion(ctx, p.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.State, p.Changes, p.Stages[0].Name, p.Stages[0].State)

	// The project has it now: a new sandbox of it starts with it.
	next, err := c.Create(ctx, "site", client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer next.Destroy(ctx)
	stdout, _, _, err := next.Output(ctx, []string{"cat", "NEWS"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(stdout))
	// Output:
	// done 1 project passed
	// made in a sandbox
}

func ExampleClient_Try() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	report, err := c.Try(ctx, "web",
		[]string{"echo 41 > answer", "echo 42 > answer", "exit 1"},
		"grep -qx 42 answer", sandboxd1.KeepNone,
		client.TryOptions{Create: client.CreateOptions{Name: "example-try"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range report.Results {
		fmt.Println(r.Name, r.Result)
	}
	fmt.Println("winner:", report.Results[report.Winner].Name)
	// Output:
	// example-try-1 fail (check: exit 1)
	// example-try-2 pass
	// example-try-3 fail (command: exit 1)
	// winner: example-try-2
}
