package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sandboxd/sandboxd/client"
)

func ExampleSandbox_Fork() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{Name: "example-fork"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)
	// What took long to set up is there in each fork.
	if _, _, _, err := sb.Output(ctx, []string{"sh", "-c", "echo built > made.txt"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Spawn(ctx, []string{"sleep", "300"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}

	r, err := sb.Fork(ctx, client.ForkOptions{Count: 2, Names: []string{"example-fork-a", "example-fork-b"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range r.IDs {
		f, err := c.Sandbox(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Destroy(ctx)
		out, _, _, err := f.Output(ctx, []string{"cat", "made.txt"}, client.ExecOptions{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s", f.Name(), out)
	}
	fmt.Println("not carried:", r.NotCarried)
	// Output:
	// example-fork-a: built
	// example-fork-b: built
	// not carried: [sleep 300]
}

func ExampleSandbox_Stop() {
	ctx := context.Background()
	c, err := client.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, "web", client.CreateOptions{Name: "example-stop"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if _, _, _, err := sb.Output(ctx, []string{"sh", "-c", "echo kept > notes.txt"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}

	if err := sb.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	_, _, _, err = sb.Output(ctx, []string{"cat", "notes.txt"}, client.ExecOptions{})
	fmt.Println("refused while stopped:", errors.Is(err, client.ErrStopped))
	if err := sb.Start(ctx); err != nil {
		log.Fatal(err)
	}
	out, _, _, err := sb.Output(ctx, []string{"cat", "notes.txt"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after the start: %s", out)
	// Output:
	// refused while stopped: true
	// after the start: kept
}
