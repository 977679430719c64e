package integration

import "testing"

// TestMCPBackgroundCheckpointsAndTry: spawn and logs follow a background
// process to its end; a checkpoint and a rollback bring files back, as
// file_list and sandbox_status show; try keeps the passing variant's
// sandbox.
func TestMCPBackgroundCheckpointsAndTry(t *testing.T) {
	install(t)
	cs, _, _ := mcpSession(t)
	var sb struct {
		ID, Network string
		Checkpoints []struct{ Name string }
	}
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "web", "network": "none", "memory": "256M"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })

	var spawned struct{ Process string }
	toolOK(t, cs, "spawn", map[string]any{"sandbox": sb.ID, "command": []string{"sh", "-c", "echo started; sleep 0.3; echo done; exit 4"}}, &spawned)
	var logs mcpLogs
	var output string
	waitFor(t, "the background process to end", func() bool {
		toolOK(t, cs, "logs", map[string]any{"sandbox": sb.ID, "process": spawned.Process, "offset": logs.Next}, &logs)
		output += logs.Output
		return logs.Ended
	})
	if output != "started\ndone\n" {
		t.Errorf("the background process's output: %q", output)
	}
	var ps struct {
		Processes []struct {
			ID, How  string
			ExitCode int `json:"exit_code"`
		}
	}
	toolOK(t, cs, "logs", map[string]any{"sandbox": sb.ID}, &ps)
	if len(ps.Processes) != 1 || ps.Processes[0].ID != spawned.Process || ps.Processes[0].How != "exited" || ps.Processes[0].ExitCode != 4 {
		t.Errorf("the background processes: %+v", ps.Processes)
	}

	var wrote struct{ Bytes int }
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "kept.txt", "content": "kept\n"}, &wrote)
	var cp struct{ Name, Created string }
	toolOK(t, cs, "checkpoint", map[string]any{"sandbox": sb.ID, "name": "one"}, &cp)
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "lost.txt", "content": "lost\n"}, &wrote)
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "kept.txt", "content": "more\n", "append": true}, &wrote)
	var rb struct{ Checkpoint string }
	toolOK(t, cs, "rollback", map[string]any{"sandbox": sb.ID, "name": "one"}, &rb)
	var files struct {
		Entries []struct{ Path, Kind, Mode string }
	}
	toolOK(t, cs, "file_list", map[string]any{"sandbox": sb.ID}, &files)
	names := map[string]string{}
	for _, e := range files.Entries {
		names[e.Path] = e.Kind + " " + e.Mode
	}
	if names["kept.txt"] != "file 0644" || names["index.html"] == "" || names["lost.txt"] != "" {
		t.Errorf("file_list after the rollback: %v; want kept.txt and index.html, not lost.txt", names)
	}
	var read struct{ Content string }
	toolOK(t, cs, "file_read", map[string]any{"sandbox": sb.ID, "path": "kept.txt"}, &read)
	if read.Content != "kept\n" {
		t.Errorf("kept.txt after the rollback: %q", read.Content)
	}
	toolOK(t, cs, "sandbox_status", map[string]any{"sandbox": sb.ID}, &sb)
	if sb.Network != "none" || len(sb.Checkpoints) != 1 || sb.Checkpoints[0].Name != "one" {
		t.Errorf("sandbox_status: %+v", sb)
	}
	toolFails(t, cs, "rollback", map[string]any{"sandbox": sb.ID, "name": "two"}, `two[^\n]*\n\(sandbox_status lists`)

	var report struct {
		Winner  int
		Results []struct {
			ID     string
			Passed bool
			Kept   bool
		}
	}
	toolOK(t, cs, "try", map[string]any{"project": "web", "variants": []string{"exit 3", "echo ok > v"}, "check": "test -f v"}, &report)
	for _, r := range report.Results {
		if r.Kept {
			t.Cleanup(func() { ctl(t, "", "destroy", r.ID) })
		}
	}
	if report.Winner != 1 || len(report.Results) != 2 || report.Results[0].Passed || !report.Results[1].Passed || !report.Results[1].Kept || report.Results[0].Kept {
		t.Errorf("try: %+v; want the second variant to win and be kept", report)
	}
}
