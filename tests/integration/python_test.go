package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Python client (the package contrib/python/sandboxd, issue 19)
// against the real daemon: its own tests, on Debian's python3 and
// python3-dbus-next, each run as a subtest. The script runs in the
// testbed's namespaces, as this test does, so the system bus it reaches at
// the standard socket is the testbed's, where the daemon serves.
//
// Which of them need the file API (ReadFile, WriteFile, ListFiles,
// EditFile, ReadFileTo, WriteFileFrom): the workflow, the chunked files,
// the streams and the paths outside.
var pythonTests = []string{
	"Workflow.test_an_agent_fixes_a_failing_test_and_promotes_it",
	"Workflow.test_files_are_read_and_written_in_chunks_and_appended",
	"Streams.test_a_large_file_round_trips_through_upload_and_download",
	"Streams.test_a_download_the_host_cannot_hold_fails_and_leaves_nothing",
	"Streams.test_a_fifo_is_refused_by_name_not_waited_on",
	"Exec.test_exec_passes_stdin_output_status_env_and_cwd",
	"Exec.test_a_string_is_a_shell_line",
	"Exec.test_checkpoint_rollback_and_background_processes",
	"Exec.test_an_interrupted_exec_kills_its_command",
	"Exec.test_a_daemon_restart_ends_a_waiting_exec",
	"Boot.test_a_booted_sandbox_runs_the_hosts_nginx",
	"Boot.test_the_system_of_a_sandbox_not_booted_is_wrong_state",
	"Try.test_try_runs_variants_and_keeps_the_winner",
	"Conflicts.test_a_conflict_is_seen_in_three_versions_merged_and_promoted",
	"Promotions.test_nothing_to_promote_is_told_apart_and_recorded_nowhere",
	"Sessions.test_sessions_keep_their_scope_and_take_the_environment",
	"Sessions.test_a_go_session_keeps_declarations_and_imports_the_module",
	"Errors.test_errors_have_their_dbus_names",
	"Errors.test_paths_outside_the_sandbox_reach_no_host_file",
}

func TestPythonClient(t *testing.T) {
	tb := install(t)
	tag := suffix()
	// A root-only host file that sandboxes do not see (/var/log is hidden
	// in them): the paths test must never read it through the file API.
	secret := "/var/log/sandboxd-py-secret-" + tag
	if err := os.WriteFile(secret, []byte("py secret "+tag), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(secret)
		// What the workflow promoted into the project, and what an escape
		// would have left (the test fails if it is there).
		for _, p := range []string{"calc_" + tag + ".py", "test_calc_" + tag + ".py"} {
			os.Remove(filepath.Join(tb.Btrfs.Project, p))
		}
		os.Remove("/var/log/pwned-" + tag)
		os.Remove("/tmp/pwned-" + tag)
	})
	for _, name := range pythonTests {
		runPython(t, name, "SANDBOXD_TEST_TAG="+tag, "SANDBOXD_TEST_SECRET="+secret)
	}
}

// TestPythonClientApproval: an admin approves, with the Python client,
// the change whose digest he saw, and rejects the next, at a project
// stage whose approval is an admin's.
func TestPythonClientApproval(t *testing.T) {
	install(t)
	reconfigure(t, `
[[stage]]
name = "project"
target = "project"
approval = "admin"
`)
	runPython(t, "Promotions.test_an_admin_approves_the_change_he_saw")
}

// TestPythonClientSQLSession: a sql session of the Python client on the
// booted PostgreSQL of an adopted cluster, reached as the environment
// says.
func TestPythonClientSQLSession(t *testing.T) {
	install(t)
	id := bootedCluster(t, "pypgsql")
	runPython(t, "Sessions.test_a_sql_session_reaches_the_database_its_environment_names", "SANDBOXD_TEST_SQL_SANDBOX="+id)
}

// TestPythonClientForkStopStart: fork, stop and start (issue 31) from
// the Python client: the forks have the sandbox's files and change apart,
// a stopped sandbox refuses exec as Stopped and starts again with its
// files and its restart process, try from_ runs in forks.
func TestPythonClientForkStopStart(t *testing.T) {
	install(t)
	for _, name := range []string{
		"test_fork.Fork.test_a_fork_has_the_files_and_changes_apart",
		"test_fork.Fork.test_a_stopped_sandbox_keeps_its_files_and_starts_again",
		"test_fork.Fork.test_try_from_a_sandbox_runs_in_its_forks",
	} {
		runPython(t, name)
	}
}

var pythonRan = regexp.MustCompile(`(?m)^Ran 1 test in .*\n\nOK$`)

// runPython runs test name of contrib/python/test_sandboxd.py (Class.test)
// as a subtest; env is added to the script's environment (a
// SANDBOXD_TEST_TAG there is the run's, rather than one of its own).
func runPython(t *testing.T, name string, env ...string) {
	tb := install(t)
	repo := filepath.Dir(filepath.Dir(filepath.Dir(daemonBin))) // bin/test/sandboxd -> repository
	t.Run(name[strings.LastIndexByte(name, '.')+1:], func(t *testing.T) {
		// -B: no __pycache__ of root's in the repository.
		cmd := exec.Command("/usr/bin/python3", "-B", "contrib/python/test_sandboxd.py", "-v", name)
		cmd.Dir = repo
		cmd.Env = append(append(os.Environ(),
			"PYTHONPATH="+filepath.Join(repo, "contrib", "python"), // the package, for the script and the agents it starts
			"DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket",
			"SANDBOXD_TEST_TAG="+suffix(),
			"SANDBOXD_TEST_PROJECT_DIR="+tb.Btrfs.Project,
		), env...) // the last of a name is the one a command gets
		out, err := cmd.CombinedOutput()
		if err != nil || !pythonRan.Match(out) {
			t.Fatalf("python3 test_sandboxd.py %s: %v\n%s", name, err, out)
		}
		t.Logf("%s", out)
	})
}
