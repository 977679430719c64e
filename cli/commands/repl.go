package commands

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Repl is `sandboxctl repl`.
func Repl() *ucli.Command {
	return &ucli.Command{
		Name:      "repl",
		Usage:     "talk to a long-lived interpreter (python3, node, sh, go, sql) in a sandbox; its variables stay between inputs",
		ArgsUsage: "SANDBOX python3|node|sh|go|sql",
		Description: `Opens a session (an interpreter that lives until you leave) and sends it
what you type, an input at a time: a line, or a line and the indented
lines after it, and a line that closes a bracket (a block). Each input's output is printed; its variables,
imports and functions stay for the next. Without a terminal, stdin is
read the same way, and sandboxctl exits with the status of the last
input (0: no error). To a terminal, control characters in the output are
shown escaped.

go: each input is a snippet compiled and run against the project's
module (it may import its packages); its declarations (import, func,
type, var, const) stay, its statements run once. sql: one psql
connection to a database the sandbox runs (--database, --role; with
--root, psql runs as the role's user, postgres by default, as peer
authentication wants); SET, temporary tables and transactions last.
See docs/sessions.md.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "root", Usage: "run the interpreter as root in the sandbox (root of its user namespace)"},
			&ucli.StringFlag{Name: "database", Usage: "sql: the database to connect to (PGDATABASE)"},
			&ucli.StringFlag{Name: "role", Usage: "sql: the role to connect as (PGUSER)"},
		},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			sb := c.Handle(e)
			var env []string
			if d := cmd.String("database"); d != "" {
				env = append(env, "PGDATABASE="+d)
			}
			if r := cmd.String("role"); r != "" {
				env = append(env, "PGUSER="+r)
			}
			if len(env) > 0 && rest[0] != "sql" {
				return verb.Usage("--database and --role are for a sql session, not %s", rest[0])
			}
			sess, err := sb.OpenSession(ctx, rest[0], sbclient.ExecOptions{Root: cmd.Bool("root"), Env: env})
			if err != nil {
				return verb.FromBus("opening a "+rest[0]+" session", err)
			}
			defer func() { _ = sb.CloseSession(context.WithoutCancel(ctx), sess) }()
			w := cmd.Root().Writer
			prompt := isTerminalFD(0)
			// The interpreter's output is the sandbox's: to a terminal,
			// what would act on it (escape sequences, carriage returns,
			// C1 controls, bidi overrides) is shown escaped, as logs
			// does; its lines and tabs stay.
			escape := w == os.Stdout && isTerminalFD(1)
			var status int
			in := inputs(os.Stdin)
			for {
				if prompt {
					fmt.Fprint(w, ">>> ")
				}
				code, err := in()
				if err == io.EOF {
					if prompt {
						fmt.Fprintln(w)
					}
					break
				}
				if err != nil {
					return err
				}
				if strings.TrimSpace(code) == "" {
					continue
				}
				var out string
				if out, status, err = sb.Eval(ctx, sess, code); err != nil {
					return verb.FromBus("running the input", err)
				}
				if escape {
					out = termsafe.Output(out)
				}
				if _, err := io.WriteString(w, out); err != nil {
					return err
				}
			}
			if status != 0 {
				return verb.ExitWith(min(status, 255))
			}
			return nil
		}),
	}
}

// inputs reads r an input at a time: a line, with the lines after it
// that are indented or close a bracket (a block: a Python def, a shell
// or JavaScript function's body and its closing brace).
func inputs(r io.Reader) func() (string, error) {
	br := bufio.NewReader(r)
	var pending string
	return func() (string, error) {
		code := pending
		pending = ""
		if code == "" {
			line, err := br.ReadString('\n')
			if line == "" && err != nil {
				return "", err
			}
			code = line
		}
		for {
			line, err := br.ReadString('\n')
			if line != "" && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || strings.ContainsAny(line[:1], "})]")) {
				code += line
				continue
			}
			// The next input's first line (or the end: the next call
			// then reads EOF).
			_ = err
			pending = line
			return code, nil
		}
	}
}
