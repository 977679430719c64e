//go:build ignore

// sandboxd's session driver for go, built in the sandbox by goLauncher
// (sessions_langs.go) with the sandbox's own toolchain: playground-style,
// each input a snippet compiled and run as a program of a scratch module
// joined to the project's module by a go.work in the session's temporary
// directory (nothing is written in the project). An input's declarations
// (import, func, type, var, const) are kept for the inputs after it once
// it compiled; its statements run once, as main's body. It answers
// "<length> <status>\n<output>" on the stdout it was started with, first
// once with status 0 when it is ready; the compiler's and the program's
// output go to a file of their own.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

var (
	goBin, tmp string
	maxOut     int
	proto      *os.File
)

// decl is a kept declaration: the names it declares and its source.
type decl struct {
	names  []string
	src    string
	imp    bool
	ipath  string
	number int // the input it came from
}

var (
	kept []decl
	// current is the number of the input being run.
	current int
)

func main() {
	goBin, tmp = os.Args[1], os.Args[2]
	maxOut, _ = strconv.Atoi(os.Args[3])
	defer os.RemoveAll(tmp)
	in := os.NewFile(0, "protocol-in")
	proto = os.NewFile(1, "protocol-out")
	if err := setup(); err != nil {
		answer([]byte(err.Error()), 1)
		return
	}
	answer(nil, 0)
	for n := 1; ; n++ {
		code, err := readInput(in)
		if err != nil {
			return
		}
		out, status := run(n, code)
		answer(out, status)
	}
}

func answer(out []byte, status int) {
	if len(out) > maxOut {
		out = out[:maxOut]
	}
	proto.Write(append([]byte(fmt.Sprintf("%d %d\n", len(out), status)), out...))
}

func readInput(r io.Reader) ([]byte, error) {
	var head []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			break
		}
		if head = append(head, b[0]); len(head) > 20 {
			return nil, errors.New("bad frame header")
		}
	}
	n, err := strconv.Atoi(string(head))
	if err != nil || n < 0 {
		return nil, errors.New("bad frame header")
	}
	code := make([]byte, n)
	_, err = io.ReadFull(r, code)
	return code, err
}

// setup writes the scratch module and the go.work that joins it to the
// module of the working directory (the project's), if there is one.
func setup() error {
	ver, err := exec.Command(goBin, "env", "GOVERSION").Output()
	if err != nil {
		return fmt.Errorf("%s env GOVERSION: %v", goBin, err)
	}
	v := strings.TrimPrefix(strings.Fields(string(ver) + " go")[0], "go")
	scratch := filepath.Join(tmp, "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte("module sandboxd.session\n\ngo "+v+"\n"), 0o600); err != nil {
		return err
	}
	work := "go " + v + "\n\nuse ./scratch\n"
	if root := moduleRoot(); root != "" {
		work += "use " + strconv.Quote(root) + "\n"
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.work"), []byte(work), 0o600); err != nil {
		return err
	}
	os.Setenv("GOWORK", filepath.Join(tmp, "go.work"))
	os.Setenv("GOFLAGS", "")
	if os.Getenv("GOTOOLCHAIN") == "" {
		os.Setenv("GOTOOLCHAIN", "local")
	}
	return nil
}

// moduleRoot is the directory of the go.mod that holds the working
// directory, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && fi.Mode().IsRegular() {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// chunk is one top-level declaration or statement of an input.
type chunk struct {
	src  string
	decl bool
	// defined are the names a statement "a, b := ..." defines.
	defined []string
}

// split cuts an input at its top-level semicolons (those the scanner
// inserts at line ends too) and tells declarations from statements.
func split(code []byte) []chunk {
	fset := token.NewFileSet()
	f := fset.AddFile("input", -1, len(code))
	var s scanner.Scanner
	s.Init(f, code, func(token.Position, string) {}, 0)
	type tok struct {
		off int
		t   token.Token
		lit string
	}
	var toks []tok
	for {
		pos, t, lit := s.Scan()
		if t == token.EOF {
			break
		}
		toks = append(toks, tok{f.Offset(pos), t, lit})
	}
	var chunks []chunk
	for i := 0; i < len(toks); {
		if toks[i].t == token.SEMICOLON {
			i++
			continue
		}
		start, depth, j := toks[i].off, 0, i
		for ; j < len(toks); j++ {
			switch toks[j].t {
			case token.LPAREN, token.LBRACE, token.LBRACK:
				depth++
			case token.RPAREN, token.RBRACE, token.RBRACK:
				depth--
			}
			if depth <= 0 && toks[j].t == token.SEMICOLON {
				break
			}
		}
		end := len(code)
		if j < len(toks) {
			end = toks[j].off
		}
		isDecl := false
		switch toks[i].t {
		case token.IMPORT, token.TYPE, token.VAR, token.CONST:
			isDecl = true
		case token.FUNC:
			// func name(...) or func (recv) name(...); a literal,
			// func(...) ... { }, is a statement's.
			if i+1 < len(toks) && toks[i+1].t == token.IDENT {
				isDecl = true
			} else if i+1 < len(toks) && toks[i+1].t == token.LPAREN {
				d, k := 0, i+1
				for ; k < len(toks); k++ {
					if toks[k].t == token.LPAREN {
						d++
					} else if toks[k].t == token.RPAREN {
						if d--; d == 0 {
							break
						}
					}
				}
				isDecl = k+2 < len(toks) && toks[k+1].t == token.IDENT && (toks[k+2].t == token.LPAREN || toks[k+2].t == token.LBRACK)
			}
		}
		var defined []string
		for k := i; !isDecl && k+1 < j && toks[k].t == token.IDENT; k += 2 {
			defined = append(defined, toks[k].lit)
			if toks[k+1].t == token.DEFINE {
				break
			}
			if toks[k+1].t != token.COMMA {
				defined = nil
				break
			}
		}
		if n := i + 2*len(defined) - 1; len(defined) > 0 && (n >= j || toks[n].t != token.DEFINE) {
			defined = nil
		}
		line, col := lineCol(code, start)
		chunks = append(chunks, chunk{src: fmt.Sprintf("/*line input:%d:%d*/%s", line, col, code[start:end]), decl: isDecl, defined: defined})
		i = j + 1
	}
	return chunks
}

func lineCol(code []byte, off int) (int, int) {
	line := 1 + bytes.Count(code[:off], []byte("\n"))
	return line, off - bytes.LastIndexByte(code[:off], '\n')
}

// declared parses a declaration alone and says what it declares; nil
// when it does not parse (the compiler will say why).
func declared(src string) *decl {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package main\n"+src, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	d := &decl{src: src}
	for _, x := range f.Decls {
		switch x := x.(type) {
		case *ast.FuncDecl:
			name := x.Name.Name
			if x.Recv != nil && len(x.Recv.List) > 0 {
				name = recvName(x.Recv.List[0].Type) + "." + name
			}
			d.names = append(d.names, "name "+name)
		case *ast.GenDecl:
			for _, s := range x.Specs {
				switch s := s.(type) {
				case *ast.ImportSpec:
					d.imp = true
					p, _ := strconv.Unquote(s.Path.Value)
					d.ipath = p
					name := p
					if s.Name != nil {
						name = s.Name.Name + " " + p
					}
					d.names = append(d.names, "import "+name)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						d.names = append(d.names, "name "+n.Name)
					}
				case *ast.TypeSpec:
					d.names = append(d.names, "name "+s.Name.Name)
				}
			}
		}
	}
	return d
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

var unusedImport = regexp.MustCompile(`"([^"]+)" imported (?:as \S+ )?and not used`)

// run compiles and runs input n; its declarations are kept if it
// compiled.
func run(n int, code []byte) ([]byte, int) {
	current = n
	var fresh []decl
	var stmts, used []string
	for _, c := range split(code) {
		if !c.decl {
			stmts = append(stmts, c.src)
			for _, name := range c.defined {
				if name != "_" {
					used = append(used, "_ = "+name)
				}
			}
			continue
		}
		d := declared(c.src)
		if d == nil {
			d = &decl{src: c.src}
		}
		for _, name := range d.names {
			if name == "name main" {
				return []byte("input: main is the session's: write its statements as they are, outside any func\n"), 2
			}
		}
		d.number = n
		fresh = append(fresh, *d)
	}
	decls := merge(kept, fresh)
	// A variable an input's top level defines and leaves unused is no
	// error of a session's: it is used, after the input's statements.
	stmts = append(stmts, used...)
	var dropped map[string]bool
	for try := 0; ; try++ {
		out, ok := build(decls, stmts, dropped)
		if ok {
			break
		}
		// An import an input made and this program does not use is
		// no error of a session's: left out, once.
		if try == 0 {
			dropped = map[string]bool{}
			for _, m := range unusedImport.FindAllStringSubmatch(string(out), -1) {
				dropped[m[1]] = true
			}
			if len(dropped) > 0 {
				continue
			}
		}
		return out, 2
	}
	kept = decls
	return execute()
}

// merge is old with fresh's declarations added, each replacing the
// earlier ones of a name it declares.
func merge(old, fresh []decl) []decl {
	out := slices.Clone(old)
	for _, d := range fresh {
		out = slices.DeleteFunc(out, func(o decl) bool {
			return slices.ContainsFunc(o.names, func(n string) bool { return slices.Contains(d.names, n) })
		})
		out = append(out, d)
	}
	return out
}

// build writes the program and compiles it; its output is the
// compiler's when it fails.
func build(decls []decl, stmts []string, dropped map[string]bool) ([]byte, bool) {
	var src strings.Builder
	src.WriteString("package main\n\n")
	// Imports first, as Go wants them, whichever input made them.
	for _, imports := range []bool{true, false} {
		for _, d := range decls {
			if d.imp == imports && !dropped[d.ipath] {
				src.WriteString(rename(d) + "\n")
			}
		}
	}
	src.WriteString("\nfunc main() {\n")
	for _, s := range stmts {
		src.WriteString(s + "\n")
	}
	src.WriteString("}\n")
	dir := filepath.Join(tmp, "scratch")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o600); err != nil {
		return []byte(err.Error()), false
	}
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(tmp, "prog"), ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		var lines []string
		for _, l := range strings.SplitAfter(string(out), "\n") {
			if !strings.HasPrefix(l, "# ") {
				lines = append(lines, l)
			}
		}
		return []byte(strings.Join(lines, "")), false
	}
	return nil, true
}

// rename names a kept declaration's lines after the input it came from.
func rename(d decl) string {
	if d.number == current {
		return d.src
	}
	return strings.ReplaceAll(d.src, "/*line input:", fmt.Sprintf("/*line input %d:", d.number))
}

// execute runs the program built, in the working directory, its output
// in a file of its own.
func execute() ([]byte, int) {
	f, err := os.CreateTemp(tmp, "out")
	if err != nil {
		return []byte(err.Error()), 1
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.Command(filepath.Join(tmp, "prog"))
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	status := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		} else {
			status = ee.ExitCode()
		}
	} else if err != nil {
		fmt.Fprintf(f, "%v\n", err)
		status = 1
	}
	out := make([]byte, maxOut)
	got, _ := f.ReadAt(out, 0)
	return out[:got], status
}
