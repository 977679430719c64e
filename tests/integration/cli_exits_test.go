package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A program that is not there exits 127, one that cannot be run 126: the
// codes sh gives for the same commands in the same sandbox.
func TestCLIExecExitsAsAShellDoes(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)
	ok(t, "exec", id, "--", "sh", "-c", "printf '#!/bin/sh\\necho ran\\n' > noexec.sh && chmod 644 noexec.sh")
	for _, c := range []struct {
		argv []string
		code int
		says string
	}{
		{[]string{"no-such-program"}, 127, `no-such-program: not found in PATH`},
		{[]string{"/no/such/program"}, 127, `/no/such/program`},
		{[]string{"./noexec.sh"}, 126, `noexec.sh`},
		{[]string{"/etc"}, 126, `/etc`},
	} {
		fails(t, c.code, c.says, append([]string{"exec", id, "--"}, c.argv...)...)
		// sh, in the same sandbox, for the same command.
		if _, _, code := ctl(t, "", "exec", id, "--", "sh", "-c", `"$@"`, "sh", c.argv[0]); code != c.code {
			t.Errorf("sh -c %s in the sandbox exits %d; sandboxctl exec was held to %d", c.argv[0], code, c.code)
		}
	}
	fails(t, 127, `/no/such/program`, "run", "--detach", id, "--", "/no/such/program")
	// What ran and failed is still its own status.
	if _, _, code := ctl(t, "", "exec", id, "--", "sh", "-c", "exit 1"); code != 1 {
		t.Errorf("exec of sh -c 'exit 1': exit %d", code)
	}
}

// Every --json with a time gives it as RFC 3339: list, status,
// checkpoint, checkpoints, ps (and promotions, when there are some).
func TestCLIJSONTimesAreRFC3339(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "--ttl", "1h", "web"))
	defer ctl(t, "", "destroy", id)
	ok(t, "checkpoint", id, "t0")
	ok(t, "run", "--detach", id, "--", "sleep", "300")
	ended := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "true"))
	eventually(t, "the short process ended", func() bool { return processes(t, id)[ended].Ended != nil })
	seen := 0
	for _, args := range [][]string{
		{"list"}, {"status", id}, {"checkpoint", id, "t1"}, {"checkpoints", id}, {"ps", id}, {"promotions"},
	} {
		out := ok(t, append([]string{"--json"}, args...)...)
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("sandboxctl --json %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		walkJSON(v, func(key string, val any) {
			switch strings.ToLower(key) {
			case "created", "expires", "started", "ended", "updated", "decided":
			default:
				return
			}
			s, isString := val.(string)
			if val == nil && (key == "ended" || key == "Expires") {
				return // none: a running process's end, no time to live
			}
			if _, err := time.Parse(time.RFC3339Nano, s); !isString || err != nil {
				t.Errorf("sandboxctl --json %s: %q is %v (%T); want RFC 3339\n%s", strings.Join(args, " "), key, val, val, out)
				return
			}
			seen++
		})
	}
	// list, status's Created and Expires, checkpoint, 2 checkpoints, 2
	// processes' starts and one end.
	if seen < 9 {
		t.Errorf("%d times seen in the --json outputs; want at least 9", seen)
	}
}

// walkJSON calls f with each key and value of v's objects, at any depth.
func walkJSON(v any, f func(key string, val any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			f(k, x)
			walkJSON(x, f)
		}
	case []any:
		for _, x := range v {
			walkJSON(x, f)
		}
	}
}

// A relative working directory starts at the project's directory, as a
// file call's relative path does; an absolute one is taken as it is.
func TestCLIExecRelativeWorkdirStartsAtTheProject(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)
	project := strings.TrimSpace(ok(t, "exec", id, "--", "pwd"))
	ok(t, "exec", id, "--", "mkdir", "-p", "sub/deeper")
	for dir, want := range map[string]string{"sub": project + "/sub", "sub/deeper": project + "/sub/deeper", "/tmp": "/tmp"} {
		if got := strings.TrimSpace(ok(t, "exec", "-w", dir, id, "--", "pwd")); got != want {
			t.Errorf("exec -w %s -- pwd: %q; want %q", dir, got, want)
		}
	}
}
