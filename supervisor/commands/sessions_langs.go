package commands

// The go and sql sessions (issue 33). Their drivers answer once before
// any input, saying whether they are ready (a toolchain found and the
// driver built; psql connected) or why not, and OpenSession waits for
// that answer, so that a session that cannot work is an error of its
// opening, not of its first input.

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
)

var (
	//go:embed drivers/go.go
	goDriver string
	//go:embed drivers/sql.py
	sqlDriver string
)

// goLauncher finds the sandbox's Go toolchain (the host's, as the
// sandbox sees it), builds the go driver ($1) with it in a temporary
// directory (without the build constraint that keeps it out of the
// daemon's module) and runs it there, with the cap on an answer ($2). Without
// a toolchain, or when the build fails, it answers why and ends.
const goLauncher = `say() { n=$(printf '%s' "$2" | wc -c); printf '%s %s\n%s' "$((n))" "$1" "$2"; exit 0; }
g=
for c in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
	if [ -n "$c" ] && [ -x "$c" ]; then g=$c; break; fi
done
[ -n "$g" ] || say 127 "no Go toolchain in the sandbox: no go on PATH, nor /usr/local/go/bin/go or /usr/lib/go/bin/go (the sandbox sees the host's /usr: install Go there)"
t=$(mktemp -d) || say 1 "making the session's temporary directory failed"
if [ -z "$GOCACHE" ] && ! mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/go-build" 2>/dev/null; then
	export GOCACHE="$t/cache"
fi
mkdir "$t/driver" && printf '%s\n' "$1" | sed '1{/^\/\/go:build ignore$/d;}' >"$t/driver/main.go" &&
	printf 'module sandboxd.driver\n\ngo 1.21\n' >"$t/driver/go.mod" || say 1 "writing the go driver failed"
if ! out=$(cd "$t/driver" && GOWORK=off GOFLAGS= GOTOOLCHAIN=local "$g" build -o "$t/driver.bin" . 2>&1); then
	rm -rf "$t"
	say 1 "building the go session's driver with $g failed: $out"
fi
exec 2>/dev/null
exec "$t/driver.bin" "$g" "$t" "$2"`

// greetingWait bounds a driver's first answer: the go driver is built
// at the session's start, from an empty build cache the first time.
const greetingWait = 3 * time.Minute

// greets says whether lang's driver answers once before any input.
func greets(lang string) bool { return lang == "go" || lang == "sql" }

// readGreeting reads a driver's first answer: nil when it is ready, else
// what it said (ErrInvalid: the session cannot work as asked).
func readGreeting(ctx context.Context, x *session) error {
	type result struct {
		status int
		text   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		head, err := readHeader(x.out)
		if err != nil {
			done <- result{err: err}
			return
		}
		var n, st int
		if _, err := fmt.Sscanf(head, "%d %d", &n, &st); err != nil || n < 0 || n > MaxEvalOutput {
			done <- result{err: fmt.Errorf("the driver answered %q", strings.TrimSpace(head))}
			return
		}
		// What it says is short; more is read and dropped.
		var b bytes.Buffer
		_, err = io.CopyN(&b, x.out, int64(min(n, 16<<10)))
		if err == nil {
			_, err = io.CopyN(io.Discard, x.out, int64(n-min(n, 16<<10)))
		}
		done <- result{status: st, text: strings.TrimSpace(b.String()), err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return fmt.Errorf("the %s session's driver ended before it was ready: %w", x.lang, r.err)
		}
		if r.status != 0 {
			return fmt.Errorf("%s: %w", r.text, supervisor.ErrInvalid)
		}
		return nil
	case <-time.After(greetingWait):
		return fmt.Errorf("the %s session's driver was not ready after %v", x.lang, greetingWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}
