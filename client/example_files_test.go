package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sandboxd/sandboxd/client"
)

// These use the file API (ReadFile, WriteFile, ListFiles, EditFile).

func ExampleSandbox_WriteFile() {
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

	// A relative path is the project's; the file is the caller's, as if
	// a command of the caller's had written it.
	if err := sb.WriteFile(ctx, "run.sh", []byte("#!/bin/sh\necho ran\n"), client.WriteOptions{Mode: 0o755}); err != nil {
		log.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "run.sh", []byte("echo again\n"), client.WriteOptions{Append: true}); err != nil {
		log.Fatal(err)
	}
	stdout, _, _, err := sb.Output(ctx, []string{"./run.sh"}, client.ExecOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(stdout))

	err = sb.WriteFile(ctx, "missing.txt", []byte("x"), client.WriteOptions{MustExist: true})
	fmt.Println(err != nil)
	// Output:
	// ran
	// again
	// true
}

func ExampleSandbox_ReadFile() {
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

	data, err := sb.ReadFile(ctx, "index.html", client.ReadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", data)

	// At most 4 bytes: a larger file is an error, not a cut one.
	_, err = sb.ReadFile(ctx, "index.html", client.ReadOptions{Limit: 4})
	fmt.Println(errors.Is(err, client.ErrTooLarge))

	part, err := sb.ReadFileAt(ctx, "index.html", 4, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", part)
	// Output:
	// "<h1>web</h1>\n"
	// true
	// "web"
}

func ExampleSandbox_ListFiles() {
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
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "mkdir -p docs && echo hi > docs/a.txt && ln -s docs/a.txt a"}, client.ExecOptions{}); err != nil {
		log.Fatal(err)
	}

	entries, err := sb.ListFiles(ctx, ".", client.ListOptions{Recursive: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		switch e.Kind {
		case "file":
			fmt.Println(e.Path, e.Kind, e.Size, "bytes")
		case "symlink":
			fmt.Println(e.Path, e.Kind, "to", e.Target)
		default:
			fmt.Println(e.Path, e.Kind)
		}
	}
	// Unordered output:
	// a symlink to docs/a.txt
	// docs dir
	// docs/a.txt file 3 bytes
	// index.html file 13 bytes
}

func ExampleSandbox_EditFile() {
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

	n, err := sb.EditFile(ctx, "index.html", "web", "the web")
	if err != nil {
		log.Fatal(err)
	}
	data, err := sb.ReadFile(ctx, "index.html", client.ReadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(n, " ", string(data))
	// Output: 1 <h1>the web</h1>
}
