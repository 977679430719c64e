package integration

import (
	"slices"
	"strings"
	"testing"
)

// TestMCPInspectorForkStopStart: with the inspector's CLI in each
// protocol era, issue 31's tools as an agent calls them: a sandbox that
// wrote a file (and runs a background process) forked 2 ways, each fork
// has the file and changes apart from the other and from the sandbox,
// the process not carried (said); the sandbox stopped, a command in it
// refused with the words and sandbox_start's hint, started, the file and
// the process spawned with restart there again.
func TestMCPInspectorForkStopStart(t *testing.T) {
	for _, era := range []string{"modern", "legacy"} {
		t.Run(era, func(t *testing.T) { inspectorForkStopStart(t, era) })
	}
}

func inspectorForkStopStart(t *testing.T, era string) {
	project := "insp-fork-" + era
	addProject(t, project, map[string]string{"README": "fork\n"})
	in := inspector(t, era)

	var sb struct{ ID, Name string }
	inspect(t, in, &sb, "sandbox_create", "project="+project, "name="+project+"-src", "ttl_minutes=30")
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	// sh runs a shell line in a sandbox with exec: its stdout (in the
	// text, under its heading), exit 0.
	sh := func(id, line string) string {
		t.Helper()
		var run mcpExec
		res := inspect(t, in, &run, "exec", idArg("sandbox", id), "shell="+line)
		if run.ExitCode != 0 || run.How != "exited" {
			t.Fatalf("exec %q in %s (%s era): %+v, text %q", line, id, era, run, res.Text())
		}
		stdout, _ := execSections(res.Text())
		return stdout
	}
	sh(sb.ID, "echo built > made.txt")
	var p struct{ Process string }
	inspect(t, in, &p, "spawn", idArg("sandbox", sb.ID), "shell=sleep 300")

	var forks struct {
		IDs        []string `json:"ids"`
		NotCarried []string `json:"not_carried"`
	}
	names := `names=["` + project + `-a","` + project + `-b"]`
	res := inspect(t, in, &forks, "sandbox_fork", idArg("sandbox", sb.ID), "count=2", names, `spawn=["sleep 301"]`)
	for _, id := range forks.IDs {
		t.Cleanup(func() { ctl(t, "", "destroy", id) })
	}
	if len(forks.IDs) != 2 || forks.IDs[0] == forks.IDs[1] || slices.Contains(forks.IDs, sb.ID) {
		t.Fatalf("sandbox_fork count 2 (%s era): %+v, text %q; want 2 new ids", era, forks, res.Text())
	}
	if !strings.Contains(strings.Join(forks.NotCarried, "\n"), "sleep 300") {
		t.Errorf("sandbox_fork (%s era): not_carried %q; want the sandbox's sleep 300 named", era, forks.NotCarried)
	}
	a, b := forks.IDs[0], forks.IDs[1]
	for _, id := range forks.IDs {
		if got := sh(id, "cat made.txt"); got != "built\n" {
			t.Errorf("made.txt in fork %s (%s era): %q; want the sandbox's, built", id, era, got)
		}
	}
	var named struct{ ID string }
	inspect(t, in, &named, "sandbox_status", "sandbox="+project+"-b")
	if named.ID != b {
		t.Errorf("the fork named %s-b (%s era) is %s; want the second fork, %s", project, era, named.ID, b)
	}
	sh(a, "echo only-a > a.txt; echo changed > made.txt")
	for _, id := range []string{b, sb.ID} {
		if got := sh(id, "cat made.txt; test -e a.txt || echo no-a"); got != "built\nno-a\n" {
			t.Errorf("after a write in fork %s, %s has (%s era) %q; want made.txt as built and no a.txt", a, id, era, got)
		}
	}

	// Bad input is refused, naming it, and leaves the sandbox as it was.
	bad, run := inspectCall(t, in, "sandbox_fork", idArg("sandbox", sb.ID), "count=17")
	if !bad.IsError || !strings.Contains(bad.Text(), "give 1 to 16 forks") {
		t.Errorf("sandbox_fork count 17 (%s era): %q; want a tool error saying 1 to 16\n%s", era, bad.Text(), run)
	}

	inspect(t, in, nil, "spawn", idArg("sandbox", sb.ID), "shell=sleep 302", "restart=true")
	var stopped struct{ Stopped string }
	inspect(t, in, &stopped, "sandbox_stop", idArg("sandbox", sb.ID))
	if stopped.Stopped != sb.ID {
		t.Errorf("sandbox_stop (%s era): %+v", era, stopped)
	}
	inspect(t, in, nil, "sandbox_stop", idArg("sandbox", sb.ID)) // stopping a stopped one does nothing
	refused, run := inspectCall(t, in, "exec", idArg("sandbox", sb.ID), "shell=cat made.txt")
	if text := refused.Text(); !refused.IsError || !strings.Contains(text, "stopped") || !strings.Contains(text, "start it with sandbox_start") {
		t.Errorf("exec in the stopped sandbox (%s era): %q; want a tool error saying it is stopped and to start it with sandbox_start\n%s", era, text, run)
	}
	var started struct{ Started string }
	inspect(t, in, &started, "sandbox_start", idArg("sandbox", sb.ID))
	if started.Started != sb.ID {
		t.Errorf("sandbox_start (%s era): %+v", era, started)
	}
	if got := sh(sb.ID, "cat made.txt"); got != "built\n" {
		t.Errorf("made.txt after the start (%s era): %q; want built", era, got)
	}
	// The process spawned with restart runs again; the other does not.
	waitFor(t, "sleep 302 to run again after the start", func() bool {
		var ps struct {
			Processes []struct {
				Command []string
				Ended   string
			}
		}
		inspect(t, in, &ps, "logs", idArg("sandbox", sb.ID))
		for _, p := range ps.Processes {
			if strings.Contains(strings.Join(p.Command, " "), "sleep 302") && p.Ended == "" {
				return true
			}
		}
		return false
	})
}
