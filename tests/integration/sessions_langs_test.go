package integration

import (
	"strings"
	"testing"
)

// Issue 33's go and sql sessions, as an agent's REPL uses them.

// A go session: a function declared in one input is called in the next,
// with a package of the project's own module; the project's directory
// stays as it was (the scratch module and its go.work are the session's);
// a compile error is the input's status, and the session goes on.
func TestAGoSessionKeepsDeclarationsAndImportsTheProject(t *testing.T) {
	install(t)
	addProject(t, "goshapes", map[string]string{
		"go.mod":       "module example.com/shapes\n\ngo 1.22\n",
		"area/area.go": "package area\n\n// Square is the area of a square of side s.\nfunc Square(s int) int { return s * s }\n",
	})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "goshapes"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	// One input a line (repl's rule): the imports, the func, its call.
	out, errOut, code := ctl(t, "import \"fmt\"\nimport \"example.com/shapes/area\"\nfunc twice(n int) int { return 2 * n }\n"+
		"fmt.Println(twice(area.Square(3)))\nfmt.Println(nosuch)\nfmt.Println(\"still\", twice(1))\n", "repl", id, "go")
	if code != 0 || !strings.HasPrefix(out, "18\n") || !strings.HasSuffix(out, "still 2\n") {
		t.Errorf("a go session: exit %d, %q, %q; want 18 first and still 2 last", code, out, errOut)
	}
	if !strings.Contains(out, "undefined: nosuch") {
		t.Errorf("a go session's compile error: %q; want undefined: nosuch", out)
	}
	// The last input's status is the exit's: a compile error is 2.
	if _, _, code := ctl(t, "fmt.Println(nosuch)\n", "repl", id, "go"); code != 2 {
		t.Errorf("a go session's input that does not compile: exit %d; want 2", code)
	}
	// Over MCP, one call's func is the next call's, and a multi-line
	// input mixes declarations and statements (a variable left unused
	// among them).
	cs, _, _ := mcpSession(t)
	var repl struct {
		Output string
		Status int
	}
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "go",
		"code": "import (\n\t\"fmt\"\n\t\"example.com/shapes/area\"\n)\n\nfunc cube(n int) int { return n * area.Square(n) }\nunused := 1\nfmt.Println(\"declared\")\n"}, &repl)
	if repl.Output != "declared\n" || repl.Status != 0 {
		t.Errorf("MCP repl go, declaring cube: %+v", repl)
	}
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "go", "code": "for i := 1; i <= 3; i++ {\n\tfmt.Print(cube(i), \" \")\n}"}, &repl)
	if repl.Output != "1 8 27 " || repl.Status != 0 {
		t.Errorf("MCP repl go, calling cube: %+v; want 1 8 27", repl)
	}
	if got := ok(t, "exec", id, "--", "ls", "-A"); got != "area\ngo.mod\n" {
		t.Errorf("the project's directory after go sessions: %q; want area and go.mod alone", got)
	}
}

// A sql session on the booted PostgreSQL of an adopted cluster: a
// temporary table made in one input is there in the next (one
// connection), its rows come back as psql prints them, and an SQL error
// is an input's status, not the session's end.
func TestASQLSessionKeepsItsConnection(t *testing.T) {
	install(t)
	id := bootedCluster(t, "pgsql")
	out, errOut, code := ctl(t, "create temp table kept (n integer, word text);\n"+
		"insert into kept values (1, 'one'), (2, 'two');\n"+
		"select nosuch;\n"+
		"select n, word from kept order by n;\n", "repl", "--root", id, "sql")
	if code != 0 {
		t.Errorf("a sql session: exit %d, %q, %q; want 0 (the last input's status)", code, out, errOut)
	}
	for _, want := range []string{"CREATE TABLE\n", "INSERT 0 2\n", `ERROR:  column "nosuch" does not exist`,
		" n | word \n---+------\n 1 | one\n 2 | two\n(2 rows)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("a sql session's output:\n%s\nwant %q in it", out, want)
		}
	}
	// The temporary table was the session's: another session has none,
	// and its error is its status.
	if out, _, code := ctl(t, "select * from kept;\n", "repl", "--root", id, "sql"); code != 1 || !strings.Contains(out, `relation "kept" does not exist`) {
		t.Errorf("a second sql session reading the first's temporary table: exit %d, %q; want 1 and no such relation", code, out)
	}
	// Over MCP: the rows as a table, NULL as null, the connection kept.
	cs, _, _ := mcpSession(t)
	var repl struct {
		Output string
		Status int
		Tables []struct {
			Columns []string
			Rows    [][]*string
		}
	}
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "sql", "code": "create temp table m (n integer, word text); insert into m values (1, 'a<b'), (2, null);"}, &repl)
	if repl.Status != 0 || repl.Output != "CREATE TABLE\nINSERT 0 2\n" || len(repl.Tables) != 0 {
		t.Errorf("MCP repl sql, making a temporary table: %+v", repl)
	}
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "sql", "code": "select n, word from m order by n"}, &repl)
	if repl.Status != 0 || len(repl.Tables) != 1 || strings.Join(repl.Tables[0].Columns, ",") != "n,word" || len(repl.Tables[0].Rows) != 2 ||
		*repl.Tables[0].Rows[0][0] != "1" || *repl.Tables[0].Rows[0][1] != "a<b" || repl.Tables[0].Rows[1][1] != nil {
		t.Errorf("MCP repl sql, selecting from it: %+v; want one table n, word of (1, a<b) and (2, null)", repl)
	}
	// A database that is not there is the opening's error, named.
	_, errOut, code = ctl(t, "select 1;\n", "repl", "--root", "--database", "nosuch", id, "sql")
	if code == 0 || !strings.Contains(errOut, `database "nosuch" does not exist`) {
		t.Errorf("a sql session on a database that does not exist: exit %d, %q", code, errOut)
	}
}
