package integration

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 29's services with their data: Debian's PostgreSQL, its cluster
// made in the testbed (none on the machine: tests/install-deps.sh) and
// run by the testbed's systemd, adopted with its configuration while it
// serves; a booted sandbox starts the host's PostgreSQL on its copy and
// migrates it destructively, the host's database untouched; a
// configuration change tried in a sandbox and promoted reaches the host.

const pgUnit = "postgresql@15-main.service"

// pgPsql is PostgreSQL's own psql: Debian's /usr/bin/psql is pg_wrapper,
// which reads /etc/postgresql to pick a cluster, and so holds the
// adopted directory for a moment at each call (an adoption meeting it
// is refused as in use, rightly).
const pgPsql = "/usr/lib/postgresql/15/bin/psql"

// psqlAs runs sql through psql as postgres over the local socket, in "/"
// (never in the cluster's directories, which the adoption checks for
// holders), and returns its unaligned output.
func psqlAs(sql string) (string, error) {
	cmd := exec.Command("runuser", "-u", "postgres", "--", pgPsql, "-h", "/var/run/postgresql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql -c %q: %w: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// hostPsql runs sql on the host's cluster and fails the test on an error.
func hostPsql(t *testing.T, sql string) string {
	t.Helper()
	out, err := psqlAs(sql)
	if err != nil {
		t.Fatalf("the host's PostgreSQL: %v", err)
	}
	return out
}

// sandboxPsql runs sql in sandbox id's PostgreSQL, as postgres.
func sandboxPsql(t *testing.T, id, sql string) string {
	t.Helper()
	return strings.TrimSpace(ok(t, "exec", "--root", id, "--", "runuser", "-u", "postgres", "--",
		"psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql))
}

// hostCluster makes the testbed's 15/main afresh (the machine's own, if
// it has one, is not touched: the testbed's root is an overlay), starts
// it under the testbed's systemd and fills table items with 100 rows. It
// is dropped at the end.
func hostCluster(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err != nil {
		t.Fatalf("PostgreSQL 15 is not installed (tests/install-deps.sh installs postgresql): %v", err)
	}
	drop := func() {
		_ = exec.Command("systemctl", "stop", pgUnit).Run()
		_ = exec.Command("pg_dropcluster", "--stop", "15", "main").Run()
	}
	drop()
	t.Cleanup(drop)
	testbed.MustRun(t, "pg_createcluster", "15", "main")
	testbed.MustRun(t, "systemctl", "start", pgUnit)
	waitUntil(t, "the host's PostgreSQL answers", func() bool {
		_, err := psqlAs("select 1")
		return err == nil
	})
	hostPsql(t, "create table items (id integer primary key, name text not null); "+
		"insert into items select i, 'row ' || i from generate_series(1, 100) i")
}

// bootedCluster makes the host's cluster (hostCluster), adopts it as
// project name (released at the end), boots a sandbox of it and starts
// its PostgreSQL there; it returns the sandbox's id once that answers.
func bootedCluster(t *testing.T, name string) string {
	t.Helper()
	hostCluster(t)
	ok(t, "project", "adopt", "--restart-units", "--freeze", pgUnit, name, "/etc/postgresql", "/var/lib/postgresql")
	t.Cleanup(func() {
		// A project left adopted keeps /etc/postgresql mounted, and the
		// next test's adopt of it is refused: the host's PostgreSQL,
		// which holds it, stops first, then it is released.
		_ = exec.Command("systemctl", "stop", pgUnit).Run()
		if out, errOut, code := ctl(t, "", "project", "release", name); code != 0 {
			t.Errorf("releasing project %s at the end: exit %d: %s%s", name, code, out, errOut)
		}
	})
	id, _ := bootSandbox(t, name)
	if out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "systemctl", "start", pgUnit); code != 0 {
		t.Fatalf("systemctl start %s in the booted sandbox: exit %d: %s%s", pgUnit, code, out, errOut)
	}
	waitUntil(t, "the sandbox's PostgreSQL answers", func() bool {
		_, _, code := ctl(t, "", "exec", "--root", id, "--", "pg_isready", "-q")
		return code == 0
	})
	return id
}

// pgClient inserts a row and reads the table's rows, over and over, each
// time on a new connection, as an application of the host would. A read
// that fails is tried again (an application reconnects) for up to two
// minutes; one that still fails has failed for good.
type pgClient struct {
	mu       sync.Mutex
	acked    []int         // ids of the rows whose insert was answered
	reads    int           // reads answered
	lost     []string      // reads that failed for good
	longest  time.Duration // longest time a read waited for an answer
	badCount []string      // reads that saw fewer rows than acked
	stop     chan struct{}
	done     chan struct{}
}

func startPGClient() *pgClient {
	c := &pgClient{stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *pgClient) run() {
	defer close(c.done)
	for id := 1000; ; id++ {
		select {
		case <-c.stop:
			return
		default:
		}
		begin := time.Now()
		var out string
		var err error
		for {
			// One statement: the insert and the count are one
			// transaction, answered or not.
			out, err = psqlAs(fmt.Sprintf("insert into items values (%d, 'client %d') on conflict do nothing; "+
				"select count(*) from items where id >= 1000", id, id))
			if err == nil || time.Since(begin) > 2*time.Minute {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		waited := time.Since(begin)
		c.mu.Lock()
		c.longest = max(c.longest, waited)
		if err != nil {
			c.lost = append(c.lost, err.Error())
		} else {
			c.acked = append(c.acked, id)
			c.reads++
			// psql prints each statement's result: the count is last.
			lines := strings.Split(out, "\n")
			if n, _ := strconv.Atoi(lines[len(lines)-1]); n < len(c.acked) {
				c.badCount = append(c.badCount, fmt.Sprintf("%d rows seen after %d inserts answered", n, len(c.acked)))
			}
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Millisecond) // a pace, not a wait for anything
	}
}

func (c *pgClient) answered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func (c *pgClient) end() {
	close(c.stop)
	<-c.done
}

func TestAdoptPostgreSQLWhileItServesAndBootItsCopy(t *testing.T) {
	install(t)
	hostCluster(t)
	const name = "pg"

	// A client of the host's database before, during and after.
	client := startPGClient()
	clientEnded := false
	t.Cleanup(func() {
		if !clientEnded {
			client.end()
		}
	})
	waitUntil(t, "the client's first answers", func() bool { return client.answered() >= 5 })
	// Frozen alone it would go on writing the directory its processes
	// hold, under the project mounted back at its path: refused, naming
	// the unit, nothing moved.
	fails(t, 5, "in use by .*"+pgUnit+".*ask for their services to be restarted",
		"project", "adopt", name, "/etc/postgresql", "/var/lib/postgresql", "--freeze", pgUnit)
	for _, d := range []string{"/etc/postgresql", "/var/lib/postgresql"} {
		if out, _ := exec.Command("findmnt", "-n", d).CombinedOutput(); len(out) > 0 {
			t.Fatalf("%s is a mount point after a refused adoption: %s", d, out)
		}
	}
	began := time.Now()
	ok(t, "project", "adopt", "--restart-units", "--freeze", pgUnit, name, "/etc/postgresql", "/var/lib/postgresql")
	adoptTook := time.Since(began)
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", pgUnit).Run()
		ctl(t, "", "project", "release", name)
	})
	during := client.answered()
	waitUntil(t, "the client's answers after the adoption", func() bool { return client.answered() >= during+5 })
	client.end()
	clientEnded = true
	t.Logf("adoption: %v; the client's longest wait for an answer: %v, over %d reads", adoptTook, client.longest, client.reads)
	if len(client.lost) > 0 {
		t.Errorf("the client's reads failed for good during the adoption: %q", client.lost)
	}
	if len(client.badCount) > 0 {
		t.Errorf("the client read fewer rows than it had inserted: %q", client.badCount)
	}
	var ids []string
	for _, id := range client.acked {
		ids = append(ids, strconv.Itoa(id))
	}
	if got := hostPsql(t, "select count(*) from items where id in ("+strings.Join(ids, ",")+")"); got != strconv.Itoa(len(ids)) {
		t.Errorf("after the adoption the host has %s of the %d rows whose inserts were answered", got, len(ids))
	}
	for _, d := range []string{"/etc/postgresql", "/var/lib/postgresql"} {
		if out, err := exec.Command("findmnt", "-n", d).CombinedOutput(); err != nil || len(out) == 0 {
			t.Errorf("%s is not the project's after the adoption (no mount there): %v %s", d, err, out)
		}
	}
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", pgUnit).Output()))); st != "active" {
		t.Fatalf("%s after the adoption: %s; want active", pgUnit, st)
	}
	// What the host has, which the sandboxes must not change.
	const shape = "select count(*) || ' ' || sum(id) || ' ' || (select string_agg(column_name, ',' order by ordinal_position) " +
		"from information_schema.columns where table_name = 'items') from items"
	hostBefore := hostPsql(t, shape)

	// A booted sandbox starts the host's PostgreSQL on its copy and
	// migrates it destructively.
	id, took := bootSandbox(t, name)
	t.Logf("create --boot of the project to a running systemd: %v", took)
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service")
	if !strings.Contains(journal, "froze the services that write the project") || !strings.Contains(journal, pgUnit) {
		t.Errorf("the journal says nothing of %s frozen for the sandbox's snapshot", pgUnit)
	}
	start := time.Now()
	if out, errOut, code := ctl(t, "", "exec", "--root", id, "--", "systemctl", "start", pgUnit); code != 0 {
		log, _, _ := ctl(t, "", "exec", "--root", id, "--", "sh", "-c", "tail -n 20 /var/log/postgresql/postgresql-15-main.log")
		t.Fatalf("systemctl start %s in the booted sandbox: exit %d: %s%s\nits log:\n%s", pgUnit, code, out, errOut, log)
	}
	waitUntil(t, "the sandbox's PostgreSQL answers", func() bool {
		_, _, code := ctl(t, "", "exec", "--root", id, "--", "pg_isready", "-q")
		return code == 0
	})
	t.Logf("systemctl start %s in the sandbox to pg_isready: %v", pgUnit, time.Since(start))
	if got := sandboxPsql(t, id, shape); got != hostBefore {
		t.Errorf("the sandbox's copy of the database: %q; the host's: %q", got, hostBefore)
	}
	if got := sandboxPsql(t, id, "show ssl"); got != "on" {
		t.Errorf("the sandbox's PostgreSQL runs with ssl %q; the cluster's configuration says on", got)
	}
	migrated := sandboxPsql(t, id, "delete from items where id % 2 = 0; alter table items add column note text; "+
		"update items set note = 'migrated'; "+shape)
	if migrated == hostBefore || !strings.HasSuffix(migrated, "id,name,note") {
		t.Errorf("the migration in the sandbox: %q (the host's before: %q)", migrated, hostBefore)
	}
	if got := hostPsql(t, shape); got != hostBefore {
		t.Errorf("the host's database after the sandbox's migration: %q; it was %q", got, hostBefore)
	}
	// A configuration change, tried there: PostgreSQL reloads it.
	const conf = "/etc/postgresql/15/main/postgresql.conf"
	const edit = `runuser -u postgres -- sed -i "s/^#\?work_mem = .*/work_mem = 7MB/" ` + conf
	rootSh(t, id, edit+" && systemctl reload "+pgUnit)
	waitUntil(t, "the sandbox's PostgreSQL has the new work_mem", func() bool {
		return sandboxPsql(t, id, "show work_mem") == "7MB"
	})
	// The running sandbox's copy of the cluster's files is its own (a
	// promotion of it would carry them over the host's live cluster):
	// the change goes to the host from a sandbox that makes only it,
	// checked there by postgres itself without a server.
	cfg, _ := bootSandbox(t, name)
	rootSh(t, cfg, edit)
	if got := strings.TrimSpace(rootSh(t, cfg, "runuser -u postgres -- /usr/lib/postgresql/15/bin/postgres -C work_mem "+
		"-D /var/lib/postgresql/15/main -c config_file="+conf)); got != "7168" {
		t.Errorf("postgres -C work_mem on the sandbox's configuration: %q; want 7168 (kB)", got)
	}
	if diff := ok(t, "diff", cfg); !strings.Contains(diff, "etc/postgresql/15/main/postgresql.conf") || strings.Contains(diff, "var/lib/postgresql") {
		t.Errorf("the configuration sandbox's diff:\n%s\nwant postgresql.conf alone", diff)
	}
	if got := hostPsql(t, "show work_mem"); got == "7MB" {
		t.Fatalf("the host's work_mem is 7MB before the promotion: the check below would prove nothing")
	}
	var before, after os.FileInfo
	before, _ = os.Stat(conf)
	ok(t, "promote", cfg)
	if b, err := os.ReadFile(conf); err != nil || !strings.Contains(string(b), "\nwork_mem = 7MB\n") {
		t.Errorf("the host's %s after the promotion has no work_mem = 7MB: %v", conf, err)
	}
	after, _ = os.Stat(conf)
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if want := pg.Uid + ":" + pg.Gid + " 644"; owners(before) != want || owners(after) != want {
		t.Errorf("the host's %s: %s before the promotion, %s after; want %s (postgres's) both times", conf, owners(before), owners(after), want)
	}
	testbed.MustRun(t, "systemctl", "reload", pgUnit)
	waitUntil(t, "the host's PostgreSQL has the promoted work_mem", func() bool {
		out, err := psqlAs("show work_mem")
		return err == nil && out == "7MB"
	})
	if got := hostPsql(t, shape); got != hostBefore {
		t.Errorf("the host's database after the promotion: %q; it was %q", got, hostBefore)
	}
}

// owners is a file's owner, group and mode, as "uid:gid mode".
func owners(fi os.FileInfo) string {
	if fi == nil {
		return "missing"
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d %o", st.Uid, st.Gid, fi.Mode().Perm())
}
