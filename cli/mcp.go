package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver"
)

// tokenEnv is where `sandboxctl mcp --http` finds its bearer token when
// no --token-file is given.
const tokenEnv = "SANDBOXD_MCP_TOKEN"

func mcpCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "mcp",
		Usage: "serve sandboxd's tools to an agent over the Model Context Protocol (stdio, or HTTP with --http)",
		Description: `Serves MCP on stdin and stdout, for an agent's configuration to start:
{"command": "sandboxctl", "args": ["mcp"]}. Its tools make sandboxes and
work in them: sandbox_create, sandbox_list, sandbox_status,
sandbox_destroy, exec, spawn, logs, file_read, file_write, file_edit,
file_list, diff, checkpoint, rollback, rebase, try, promote,
promotion_status, repl. It runs as you: the agent may do what you may,
and no more. No tool approves a promotion: a stage that needs an
administrator's approval waits for ` + "`sandboxctl approve`" + `.

exec runs an argv (command) or a line of sh -c (shell); it keeps the
first and last 32 KiB of each of stdout and stderr (max_output_bytes
keeps less), ends a command after its timeout (default 5m, at most
--max-timeout) or once it wrote 32 MiB; a command that fails is a
result, not an error. file_read and file_write move at most 1 MiB a
call.

It starts and lists its tools while sandboxd is down (each call then
says how to start it), and connects at the first call. At the end of
its input it answers the calls under way, then exits:
sandboxctl mcp < requests.jsonl prints an answer to each.

With --http ADDR it serves the streamable HTTP transport instead, at
path /mcp, on a unix socket (ADDR a path with a "/", made 0600) or a
loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT; port 0
picks one); any other address is refused. Clients must send a bearer
token (Authorization: Bearer TOKEN): the one in --token-file, or in
$SANDBOXD_MCP_TOKEN; without either, one is made and printed to stderr,
once. Where it listens is printed to stderr.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "http", Usage: "serve MCP over HTTP on this unix socket path or loopback host:port, not stdio"},
			&ucli.StringFlag{Name: "token-file", Usage: "with --http: the file holding the bearer token clients must send (yours, mode 0600: refused otherwise)"},
			&ucli.DurationFlag{Name: "max-timeout", Usage: "the longest timeout exec may be asked for", Value: mcpserver.DefaultMaxExecTimeout},
		},
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if _, err := verb.Args(cmd, 0, 0); err != nil {
				return err
			}
			addr := cmd.String("http")
			if addr == "" && cmd.String("token-file") != "" {
				return verb.Usage("--token-file is for --http (stdio needs no token)")
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			// A client that went away leaves stdout a broken pipe: a
			// write there must fail, not end the process (Go's default
			// for fd 1) before it killed what the client's calls started
			// and closed its sessions.
			signal.Ignore(syscall.SIGPIPE)
			opts := mcpserver.Options{Version: cmd.Root().Version, MaxExecTimeout: cmd.Duration("max-timeout"), Connect: sbclient.Connect}
			if addr == "" {
				return serveMCP(func() error { return mcpserver.ServeStdio(ctx, nil, opts) })
			}
			token, err := mcpToken(cmd)
			if err != nil {
				return err
			}
			l, where, err := mcpserver.Listen(addr)
			if err != nil {
				return verb.Usage("%v", err)
			}
			errOut := cmd.Root().ErrWriter
			fmt.Fprintf(errOut, "sandboxctl mcp: serving MCP over HTTP on %s\n", where)
			if token.made {
				fmt.Fprintf(errOut, "sandboxctl mcp: bearer token (clients send Authorization: Bearer TOKEN): %s\n", token.value)
			}
			return serveMCP(func() error { return mcpserver.ServeHTTP(ctx, l, token.value, nil, opts) })
		},
	}
}

// serveMCP runs serve with no connection yet: the server connects at the
// first call that needs the daemon (opts.Connect), so that it starts and
// lists its tools while the daemon is down, and each call says so.
func serveMCP(serve func() error) error {
	if err := serve(); err != nil {
		return &verb.Error{Code: verb.ExitFailed, Msg: err.Error(), Err: err}
	}
	return nil
}

type bearerToken struct {
	value string
	made  bool // made now, and to be told
}

// mcpToken is the bearer token --http requires: --token-file's, the
// environment's, or a new random one.
func mcpToken(cmd *ucli.Command) (bearerToken, error) {
	if path := cmd.String("token-file"); path != "" {
		b, err := readTokenFile(path)
		if err != nil {
			return bearerToken{}, err
		}
		t := strings.TrimSpace(string(b))
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return bearerToken{}, verb.Usage("the token in %s is empty or holds white space", path)
		}
		return bearerToken{value: t}, nil
	}
	if t := strings.TrimSpace(os.Getenv(tokenEnv)); t != "" {
		if strings.ContainsAny(t, " \t\r\n") {
			return bearerToken{}, verb.Usage("$%s holds white space: a bearer token cannot", tokenEnv)
		}
		return bearerToken{value: t}, nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return bearerToken{}, &verb.Error{Code: verb.ExitFailed, Msg: "making an MCP token: " + err.Error(), Err: err}
	}
	return bearerToken{value: hex.EncodeToString(b), made: true}, nil
}

// errTokenFile: --token-file names a file that is not private to the
// caller.
var errTokenFile = errors.New("the token file is not private to its user")

// maxTokenFile bounds what --token-file reads: a token is a line.
const maxTokenFile = 4 << 10

// readTokenFile reads --token-file's token, refusing a file that others
// may read or change, or that is not the caller's, as ssh refuses such a
// key: whoever can read it can use the server as the caller, and whoever
// can write it choose the token. The checks are on the descriptor read,
// so a rename between them changes nothing.
func readTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &verb.Error{Code: verb.ExitFailed, Msg: "reading the MCP token: " + err.Error(), Err: err}
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("reading the MCP token: stat %s: %v", path, err), Err: err}
	}
	fix := fmt.Sprintf("chmod 600 %s (and make it yours: chown %d %s)", path, os.Getuid(), path)
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, &verb.Error{Code: verb.ExitUsage, Msg: fmt.Sprintf("the MCP token file %s is not a regular file", path), Err: errTokenFile}
	case st.Uid != uint32(os.Getuid()):
		return nil, &verb.Error{Code: verb.ExitDenied, Msg: fmt.Sprintf("the MCP token file %s is owned by uid %d, not by you (uid %d): its owner can change the token", path, st.Uid, os.Getuid()),
			Fix: fix, Err: errTokenFile}
	case st.Mode&0o077 != 0:
		return nil, &verb.Error{Code: verb.ExitDenied, Msg: fmt.Sprintf("the MCP token file %s has mode %04o: others than you can read or change it, and whoever reads it may use your sandboxes", path, st.Mode&0o7777),
			Fix: fmt.Sprintf("chmod 600 %s", path), Err: errTokenFile}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, &verb.Error{Code: verb.ExitFailed, Msg: "reading the MCP token: " + err.Error(), Err: err}
	}
	if len(b) > maxTokenFile {
		return nil, verb.Usage("the MCP token file %s holds more than %d bytes: a token is one line", path, maxTokenFile)
	}
	return b, nil
}
