package archtest

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// graph is the module's import graph: for each of its packages (its path
// inside the module, "cli", "supervisor/api"), what its non-test files
// import.
type graph map[string]*imports

// imports are a package's: those of the module by their path inside it
// ("cowfs"), the others whole ("go.etcd.io/bbolt"), apart so that a
// package of ours never passes for the standard library's ("runtime").
type imports struct{ ours, others map[string]bool }

func newImports() *imports { return &imports{ours: map[string]bool{}, others: map[string]bool{}} }

// rule is one line of docs/architecture.md's import rules: the packages
// it is about (from) may import, of the module's packages, only what
// allowed says yes to.
type rule struct {
	name    string
	from    func(pkg string) bool
	allowed func(imp string) bool
}

// check lists the imports of g that break r, as "FROM imports IMP".
func (r rule) check(g graph) []string {
	var bad []string
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		if !r.from(pkg) {
			continue
		}
		for _, imp := range slices.Sorted(maps.Keys(g[pkg].ours)) {
			if !r.allowed(imp) {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	return bad
}

// in says whether a package is one of rooms, or below one.
func in(rooms ...string) func(string) bool {
	return func(pkg string) bool {
		for _, r := range rooms {
			if pkg == r || strings.HasPrefix(pkg, r+"/") {
				return true
			}
		}
		return false
	}
}

// below says whether a package is below room, not room itself.
func below(room string) func(string) bool {
	return func(pkg string) bool { return strings.HasPrefix(pkg, room+"/") }
}

func is(names ...string) func(string) bool {
	return func(pkg string) bool { return slices.Contains(names, pkg) }
}

func not(f func(string) bool) func(string) bool { return func(s string) bool { return !f(s) } }

func or(f, g func(string) bool) func(string) bool { return func(s string) bool { return f(s) || g(s) } }

func anyPkg(string) bool { return true }

// rules are the import rules that hold now (docs/architecture.md, "What
// each room may import").
var rules = []rule{
	{"sandboxd1 (the wire contract) imports nothing of ours", in("sandboxd1"), in()},
	{"internal/ imports only internal/", in("internal"), in("internal")},
	{"cowfs imports nothing of the daemon", in("cowfs"), in("cowfs", "internal")},
	{"units imports nothing of the daemon", in("units"), in("units", "internal")},
	{"runtime imports only runtime and internal", in("runtime"), in("runtime", "internal")},
	// in("promote") is the engine and its rooms below: the replica
	// transport (promote/replica) and the diff renderer (promote/unidiff)
	// import neither the engine nor each other.
	{"promote and its rooms import only cowfs and internal", in("promote"), in("cowfs", "internal")},
	{"supervisor's records, audit log and journal are leaves", in("supervisor/state", "supervisor/audit", "supervisor/journal"), in("internal")},
	{"the supervisor core sits below its front door and its configuration",
		is("supervisor"), not(in("cli", "cmd", "supervisor/api", "supervisor/config", "tests"))},
	{"nothing but cmd/sandboxctl and cli's own packages imports cli", not(or(is("cmd/sandboxctl"), in("cli"))), not(in("cli"))},
	{"nothing imports cmd", anyPkg, not(in("cmd"))},
	{"client (the Go client) imports only the wire contract", in("client"), in("sandboxd1")},
	{"mcpserver (the MCP server) imports only the client, the wire contract, internal/ and its own parts", in("mcpserver"), in("client", "sandboxd1", "internal", "mcpserver")},
	{"the supervisor core imports none of its rooms (they join it by its hooks)",
		is("supervisor"), not(in(rooms...))},
	{"a room imports the core, its leaves, the lower rooms and other rooms, never the front door or the configuration",
		in(rooms...), not(in("cli", "cmd", "supervisor/api", "supervisor/config", "tests"))},
	{"the supervisor's lower parts (changeset) import only cowfs and internal/",
		in("supervisor/changeset"), in("cowfs", "internal")},
	{"the front door's parts (supervisor/api/...) import neither the front door nor one another; of the daemon only the supervisor and its rooms",
		func(pkg string) bool { return below("supervisor/api")(pkg) && !testOnly(pkg) }, func(imp string) bool {
			return in("sandboxd1", "internal")(imp) || imp == "supervisor" || in(rooms...)(imp)
		}},
	{"the init's rooms (runtime/nsinit/*) import only one another, runtime/seccomp and internal/, never nsinit", below("runtime/nsinit"),
		func(imp string) bool { return below("runtime/nsinit")(imp) || in("runtime/seccomp", "internal")(imp) }},
	{"the admission policy (supervisor/admission) imports only the records, units, runtime and internal/, never the core",
		in("supervisor/admission"), in("supervisor/state", "units", "runtime", "internal")},
	// The lower parts' other half (changeset's is above): the pure part of
	// the user namespaces stands on the records and the init's types only.
	{"the supervisor's lower parts (idmap) import only supervisor/state, runtime/nsinit and internal/",
		in("supervisor/idmap"), in("supervisor/state", "runtime/nsinit", "internal")},
	{"the project registry (supervisor/projects), a lower part of the core, imports only the supervisor's records and audit log, cowfs, units and internal/",
		in("supervisor/projects"), in("supervisor/state", "supervisor/audit", "cowfs", "units", "internal")},
	{"the user namespaces' policy (supervisor/userns), a lower part of the core, imports only idmap, the records, cowfs, runtime/nsinit and internal/",
		in("supervisor/userns"), in("supervisor/idmap", "supervisor/state", "cowfs", "runtime/nsinit", "internal")},
	{"a sandbox's disk quota (supervisor/diskquota), a lower part of the core, imports only cowfs, the records and internal/",
		in("supervisor/diskquota"), in("cowfs", "supervisor/state", "internal")},
	{"the names of what sandboxd makes (supervisor/volname), a lower part of the core, import only cowfs and internal/",
		in("supervisor/volname"), in("cowfs", "internal")},
	{"kubelet (the fleet's node) imports only the client, the wire contract and internal/ (besides virtual-kubelet and Kubernetes')",
		in("kubelet"), in("kubelet", "client", "sandboxd1", "internal")},
	{"nothing but cmd/sandboxd-kubelet imports kubelet", not(or(is("cmd/sandboxd-kubelet"), in("kubelet"))), not(in("kubelet"))},
}

// rooms are the supervisor's capabilities, each over the core's Host
// (docs/architecture.md, "The supervisor's rooms").
var rooms = []string{"supervisor/ports", "supervisor/caches", "supervisor/commands", "supervisor/checkpoints",
	"supervisor/promotion", "supervisor/adopt", "supervisor/try", "supervisor/limits", "supervisor/fork", "supervisor/metrics", "supervisor/pool"}

// cliRule waits for the wire contract (issue 16): the CLI (cli and its
// verbs' packages below it) imports only sandboxd1, the Go client on it
// and the MCP server on that (issue 19) and internal/ (termsafe), never
// the daemon's packages.
var cliRule = rule{"cli imports only cli/..., the wire contract, the client, the MCP server and internal/", in("cli"),
	in("cli", "sandboxd1", "client", "mcpserver", "internal")}

// testOnly are the packages that exist for tests: no program may link them.
var testOnly = in("tests", "supervisor/supervisortest", "supervisor/hosttest", "cowfs/cowfstest", "cowfs/cowfsfake", "units/unitsfake", "internal/treetest",
	"supervisor/api/options/optionstest")

// daemonOnly and daemonLibs are what sandboxctl must not link (issue 16,
// "Done when"): the daemon's rooms, and its store, storage and metrics libraries.
var (
	daemonOnly = in("supervisor", "cowfs", "runtime", "promote", "units")
	daemonLibs = in("go.etcd.io/bbolt", "github.com/mistifyio/go-zfs", "github.com/dennwc/btrfs", "github.com/prometheus/client_golang")
)

func TestImportRules(t *testing.T) {
	g := loadGraph(t)
	for _, r := range rules {
		for _, bad := range r.check(g) {
			t.Errorf("%s: %s", r.name, bad)
		}
	}
}

func TestProgramsLinkNoTestPackage(t *testing.T) {
	g := loadGraph(t)
	for _, prog := range []string{"cmd/sandboxd", "cmd/sandboxctl", "cmd/sandboxd-kubelet"} {
		ours, _ := deps(g, prog)
		for _, dep := range ours {
			if testOnly(dep) {
				t.Errorf("%s links %s, a package for tests (via %s)", prog, dep, strings.Join(path(g, prog, dep), " → "))
			}
		}
	}
}

func TestCLIImportsOnlyTheWireContract(t *testing.T) {
	g := loadGraph(t)
	for _, bad := range cliRule.check(g) {
		t.Errorf("%s: %s", cliRule.name, bad)
	}
	ours, others := deps(g, "cmd/sandboxctl")
	for _, dep := range ours {
		if daemonOnly(dep) {
			t.Errorf("cmd/sandboxctl links %s, a package of the daemon's (via %s)", dep, strings.Join(path(g, "cmd/sandboxctl", dep), " → "))
		}
	}
	for _, dep := range others {
		if daemonLibs(dep) {
			t.Errorf("cmd/sandboxctl links %s, a library of the daemon's (imported by %s)", dep, strings.Join(importers(g, "cmd/sandboxctl", dep), ", "))
		}
	}
}

// kubernetesLibs are what only sandboxd-kubelet links: virtual-kubelet
// and Kubernetes' modules (a hundred megabytes the daemon and sandboxctl
// do without).
var kubernetesLibs = func(pkg string) bool {
	return strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") ||
		strings.HasPrefix(pkg, "github.com/virtual-kubelet/")
}

func TestDaemonAndCLILinkNoKubernetes(t *testing.T) {
	g := loadGraph(t)
	for _, prog := range []string{"cmd/sandboxd", "cmd/sandboxctl"} {
		_, others := deps(g, prog)
		for _, dep := range others {
			if kubernetesLibs(dep) {
				t.Errorf("%s links %s (imported by %s): only sandboxd-kubelet may", prog, dep, strings.Join(importers(g, prog, dep), ", "))
			}
		}
	}
	if _, others := deps(g, "cmd/sandboxd-kubelet"); !slices.ContainsFunc(others, kubernetesLibs) {
		t.Error("cmd/sandboxd-kubelet links no Kubernetes package: the test reads the wrong graph")
	}
}

// TestRulesCatchBreaks proves the checks can fail: a graph with one break
// of each rule gets exactly that break reported by it.
func TestRulesCatchBreaks(t *testing.T) {
	pkgs := []string{"sandboxd1", "internal/termsafe", "internal/crashpoint", "cowfs", "cowfs/btrfs", "units", "runtime/nsinit",
		"runtime/nsinit/world", "runtime/nsinit/boot", "runtime/egress", "promote", "supervisor", "supervisor/state", "supervisor/api", "supervisor/config", "cli",
		"cli/verb", "cmd/sandboxctl", "cmd/sandboxd", "tests/testbed", "client", "mcpserver", "supervisor/ports", "supervisor/changeset",
		"supervisor/api/guard", "supervisor/api/access", "supervisor/admission", "supervisor/idmap", "supervisor/projects", "supervisor/userns", "supervisor/diskquota",
		"supervisor/volname", "kubelet", "cmd/sandboxd-kubelet"}
	breaks := map[string][2]string{
		rules[0].name:  {"sandboxd1", "internal/termsafe"},
		rules[1].name:  {"internal/termsafe", "cowfs"},
		rules[2].name:  {"cowfs/btrfs", "runtime/nsinit"},
		rules[3].name:  {"units", "cowfs"},
		rules[4].name:  {"runtime/egress", "supervisor"},
		rules[5].name:  {"promote", "supervisor/state"},
		rules[6].name:  {"supervisor/state", "cowfs"},
		rules[7].name:  {"supervisor", "supervisor/api"},
		rules[8].name:  {"supervisor/api", "cli"},
		rules[9].name:  {"tests/testbed", "cmd/sandboxd"},
		rules[10].name: {"client", "internal/termsafe"},
		rules[11].name: {"mcpserver", "units"},
		rules[12].name: {"supervisor", "supervisor/ports"},
		rules[13].name: {"supervisor/ports", "supervisor/api"},
		rules[14].name: {"supervisor/changeset", "supervisor"},
		rules[15].name: {"supervisor/api/guard", "supervisor/api/access"},
		rules[16].name: {"runtime/nsinit/world", "runtime/nsinit"},
		rules[17].name: {"supervisor/admission", "supervisor"},
		rules[18].name: {"supervisor/idmap", "supervisor"},
		rules[19].name: {"supervisor/projects", "supervisor"},
		rules[20].name: {"supervisor/userns", "supervisor"},
		rules[21].name: {"supervisor/diskquota", "supervisor"},
		rules[22].name: {"supervisor/volname", "supervisor/state"},
		rules[23].name: {"kubelet", "supervisor"},
		rules[24].name: {"cmd/sandboxd", "kubelet"},
		cliRule.name:   {"cli", "supervisor/config"},
	}
	g := graph{}
	for _, p := range pkgs {
		g[p] = newImports()
	}
	// Allowed edges, which must not be reported.
	for _, e := range [][2]string{{"cmd/sandboxctl", "cli"}, {"cli", "sandboxd1"}, {"cli", "internal/termsafe"},
		{"cli", "client"}, {"cli", "cli/verb"}, {"cli/verb", "sandboxd1"}, {"cli/verb", "client"}, {"client", "sandboxd1"}, {"cli", "mcpserver"}, {"mcpserver", "client"}, {"mcpserver", "sandboxd1"},
		{"mcpserver", "internal/termsafe"},
		{"supervisor", "promote"}, {"supervisor", "runtime/nsinit"}, {"promote", "cowfs"}, {"runtime/nsinit", "internal/crashpoint"},
		{"supervisor/api", "supervisor"}, {"cowfs/btrfs", "cowfs"}, {"supervisor/ports", "supervisor"},
		{"supervisor/api", "supervisor/ports"}, {"supervisor", "supervisor/changeset"}, {"supervisor/changeset", "cowfs"},
		{"supervisor/api", "supervisor/api/guard"}, {"supervisor/api/guard", "supervisor"}, {"supervisor/api/guard", "sandboxd1"},
		{"supervisor/api/access", "internal/termsafe"},
		{"runtime/nsinit", "runtime/nsinit/boot"}, {"runtime/nsinit/boot", "runtime/nsinit/world"},
		{"supervisor", "supervisor/admission"}, {"supervisor/admission", "supervisor/state"}, {"supervisor/admission", "runtime/egress"},
		{"supervisor", "supervisor/idmap"}, {"supervisor/idmap", "supervisor/state"}, {"supervisor/idmap", "runtime/nsinit"},
		{"supervisor", "supervisor/projects"}, {"supervisor/projects", "supervisor/state"}, {"supervisor/projects", "cowfs"},
		{"supervisor", "supervisor/userns"}, {"supervisor/userns", "supervisor/idmap"}, {"supervisor/userns", "cowfs"},
		{"supervisor", "supervisor/diskquota"}, {"supervisor/diskquota", "cowfs"},
		{"supervisor", "supervisor/volname"}, {"supervisor/volname", "cowfs"},
		{"cmd/sandboxd-kubelet", "kubelet"}, {"kubelet", "client"}, {"kubelet", "sandboxd1"}} {
		g[e[0]].ours[e[1]] = true
	}
	g["runtime/nsinit"].others["runtime"] = true
	g["supervisor/config"].others["go.etcd.io/bbolt"] = true
	for _, e := range breaks {
		g[e[0]].ours[e[1]] = true
	}
	for _, r := range append(slices.Clone(rules), cliRule) {
		e := breaks[r.name]
		want := []string{e[0] + " imports " + e[1]}
		if got := r.check(g); !slices.Equal(got, want) {
			t.Errorf("%s: reported %q, want %q", r.name, got, want)
		}
	}
	// The rooms below promote are held apart from the engine and each
	// other by the same rule.
	below := graph{"promote": newImports(), "promote/replica": newImports(), "promote/unidiff": newImports()}
	below["promote/replica"].ours["cowfs/sendstream"] = true
	below["promote/unidiff"].ours["internal/fsat"] = true
	below["promote/replica"].ours["promote"] = true
	below["promote/unidiff"].ours["promote/replica"] = true
	want := []string{"promote/replica imports promote", "promote/unidiff imports promote/replica"}
	if got := rules[5].check(below); !slices.Equal(got, want) {
		t.Errorf("%s: reported %q, want %q", rules[5].name, got, want)
	}
	if !testOnly("tests/testbed") || !testOnly("cowfs/cowfsfake") || !testOnly("units/unitsfake") || testOnly("supervisor") || !daemonLibs("go.etcd.io/bbolt/errors") || daemonOnly("sandboxd1") {
		t.Error("testOnly, daemonOnly or daemonLibs says the wrong thing of a package")
	}
	ours, others := deps(g, "cmd/sandboxctl")
	if !slices.Contains(ours, "supervisor/config") || !slices.Contains(ours, "cowfs") || !slices.Equal(others, []string{"go.etcd.io/bbolt"}) {
		t.Errorf("deps of cmd/sandboxctl in the broken graph: %q and %q, want them to reach supervisor/config, cowfs and bbolt", ours, others)
	}
	if got := importers(g, "cmd/sandboxctl", "go.etcd.io/bbolt"); !slices.Equal(got, []string{"supervisor/config"}) {
		t.Errorf("importers of bbolt: %q, want supervisor/config", got)
	}
}

// deps lists what pkg links, pkg left out: the packages of the module it
// reaches through their non-test imports (ours), and the others they
// import directly (others).
func deps(g graph, pkg string) (ours, others []string) {
	seen := map[string]bool{pkg: true}
	ext := map[string]bool{}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if g[p] == nil {
			continue
		}
		maps.Copy(ext, g[p].others)
		for imp := range g[p].ours {
			if !seen[imp] {
				seen[imp] = true
				queue = append(queue, imp)
			}
		}
	}
	delete(seen, pkg)
	return slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(ext))
}

// importers lists the packages of ours, among those pkg links, that import
// the other package lib.
func importers(g graph, pkg, lib string) []string {
	ours, _ := deps(g, pkg)
	var out []string
	for _, p := range append(ours, pkg) {
		if g[p] != nil && g[p].others[lib] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// path is a shortest chain of imports from one package to another, for
// the message.
func path(g graph, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		if g[p] == nil {
			continue
		}
		for _, imp := range slices.Sorted(maps.Keys(g[p].ours)) {
			if _, ok := prev[imp]; !ok {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return []string{from, "?", to}
}

// loadGraph reads the imports of every package of the module this test is
// in, from the non-test files' import clauses (all of them, whatever
// their build constraints: a file for another architecture counts too).
func loadGraph(t *testing.T) graph {
	t.Helper()
	root, module := moduleRoot(t)
	g := graph{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("reading the imports of %s: %w", p, err)
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if c.Pos() < f.Package && c.Text == "//go:build ignore" {
					return nil // not part of any build
				}
			}
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if g[pkg] == nil {
			g[pkg] = newImports()
		}
		for _, im := range f.Imports {
			imp, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", p, im.Path.Value, err)
			}
			switch r, ok := strings.CutPrefix(imp, module+"/"); {
			case imp == module:
				g[pkg].ours["."] = true
			case ok:
				g[pkg].ours[r] = true
			default:
				g[pkg].others[imp] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"cli", "cmd/sandboxctl", "cmd/sandboxd", "cowfs", "supervisor", "sandboxd1"} {
		if g[must] == nil {
			t.Fatalf("no package %s found under %s: the test reads the wrong tree", must, root)
		}
	}
	return g
}

// moduleRoot finds the go.mod above the working directory and returns its
// directory and the module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
