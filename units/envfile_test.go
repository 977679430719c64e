package units

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The reader of EnvironmentFile= against systemd.exec(5)'s rules, one
// tricky input each. environment_test.go checks the same kind of file
// against what the testbed's real systemd gives a service.
func TestParseEnvFile(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"plain", "A=1\nB=2\n", []string{"A=1", "B=2"}},
		{"comments and blank lines", "# c\n\n; c\n   # indented\nA=1\n", []string{"A=1"}},
		{"a '#' later in a line is text", "A=1 # not a comment\n", []string{"A=1 # not a comment"}},
		{"whitespace around key and value", "  \tA \t=  x  y \t\n", []string{"A=x  y"}},
		{"a line without '=' is skipped", "JUST TEXT\nA=1\n", []string{"A=1"}},
		{"empty values", "A=\nB=   \nC=''\n", []string{"A=", "B=", "C="}},
		{"single quotes are verbatim", `A='x \n $y " \'` + "\n", []string{`A=x \n $y " \`}},
		{"single quotes span lines", "A='one\ntwo'\nB=3\n", []string{"A=one\ntwo", "B=3"}},
		{"double quotes escape \" \\ ` $ only", `A="a\"b\\c\$d\` + "`" + `e\qf"`, []string{`A=a"b\c$d` + "`" + `e\qf`}},
		{"double quotes span lines", "A=\"one\ntwo\"\n", []string{"A=one\ntwo"}},
		{"a backslash-newline in double quotes joins", "A=\"one\\\ntwo\"\n", []string{"A=onetwo"}},
		{"a backslash-newline unquoted joins", "A=one\\\n  two\nB=2\n", []string{"A=one  two", "B=2"}},
		{"unquoted backslashes", `A=a\\b\c\ ` + "\n", []string{`A=a\bc `}},
		{"whitespace outside quotes is dropped", "A=  \"x \"  \n", []string{"A=x "}},
		{"quotes after the first character are kept", `A=x "y z"` + "\n", []string{`A=x "y z"`}},
		{"quoted pieces join", `A='a'"b"c` + "\n", []string{"A=abc"}},
		{"a later assignment wins, in place", "A=1\nB=2\nA=3\n", []string{"A=3", "B=2"}},
		{"no newline at the end", "A=1\nB=two words  ", []string{"A=1", "B=two words"}},
		{"an unterminated quote runs to the end", "A='abc\nB=1", []string{"A=abc\nB=1"}},
		{"CRLF lines", "A=1\r\nB=\"2\"\r\n", []string{"A=1", "B=2"}},
		{"a lone CR ends a line", "A=1\rB=2", []string{"A=1", "B=2"}},
		{"a comment's backslash does not continue it", "# c \\\nA=1\n", []string{"A=1"}},
		// Invalid names are read (validAssignment drops them after).
		{"names are not checked here", "export X=1\n1A=2\nB-C=3\n==x\n", []string{"export X=1", "1A=2", "B-C=3", "==x"}},
		{"UTF-8 is kept", "A=héllo ☃\n", []string{"A=héllo ☃"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseEnvFile([]byte(c.in), false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("parseEnvFile(%q) =\n%q\nwant\n%q", c.in, got, c.want)
			}
		})
	}
}

// Before systemd 254, a comment that ends in a backslash swallows the
// next line.
func TestParseEnvFileOldComments(t *testing.T) {
	got, err := parseEnvFile([]byte("# c \\\nA=1\nB=2\n"), true)
	if err != nil || !slices.Equal(got, []string{"B=2"}) {
		t.Fatalf("parseEnvFile, comments continuing = %q, %v; want [B=2]", got, err)
	}
}

func TestParseEnvFileRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"A=1\nB=x\x00y\n", "line 2 holds a NUL byte"},
		{"A=1\nB=\xff\xfe\n", `line 2: the assignment of "B" is not valid UTF-8`},
	} {
		if _, err := parseEnvFile([]byte(c.in), false); err == nil || err.Error() != c.want {
			t.Errorf("parseEnvFile(%q) = %v; want %q", c.in, err, c.want)
		}
	}
}

func TestValidAssignment(t *testing.T) {
	for kv, want := range map[string]bool{
		"A=1": true, "_x9=": true, "a_B=x=y": true, "PATH=/bin:/usr/bin": true, "A=line\nbreak": true,
		"1A=2": false, "B-C=3": false, "export X=1": false, "==x": false, "A": false, "=1": false,
		"A=\xff": false, "É=1": false,
	} {
		if got := validAssignment(kv); got != want {
			t.Errorf("validAssignment(%q) = %v; want %v", kv, got, want)
		}
	}
}

// Environment= first, then each file in order (a glob's matches sorted,
// its dotfiles left out), later assignments winning, then
// UnsetEnvironment=; a missing "-" file is skipped.
func TestEnvironmentAppliesSettingsInSystemdsOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("first.env", "B=file\nC=file\nbad-name=x\n")
	write("d/10.env", "D=10\nE=10\n")
	write("d/20.env", "E=20\n")
	write("d/.hidden.env", "E=hidden\n")
	s := settings{
		Env: []string{"A=env", "B=env", "U=gone"},
		Files: []envFile{
			{Path: first},
			{Path: filepath.Join(dir, "missing.env"), Ignore: true},
			{Path: filepath.Join(dir, "nothing-*.env"), Ignore: true},
			{Path: filepath.Join(dir, "d", "*.env")},
		},
		Unset: []string{"U", "D=10", "C=other"},
	}
	got, err := s.environment(readEnvFile, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=env", "B=file", "C=file", "E=20"}
	if !slices.Equal(got, want) {
		t.Fatalf("environment() = %q; want %q", got, want)
	}
}

func TestEnvironmentFileErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.env")
	if err := os.WriteFile(big, []byte("A="+strings.Repeat("x", MaxEnvFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.env")
	link := filepath.Join(dir, "link.env")
	if err := os.Symlink("/etc/shadow", link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
		is         error
	}{
		{missing, "EnvironmentFile=" + missing + ": " + missing + ": no such file or directory", fs.ErrNotExist},
		// A symlink (to a root-only file, say) that another user could
		// have put there is not followed.
		{link, link + " is a symlink", nil},
		{filepath.Join(dir, "none-*.env"), "EnvironmentFile=" + dir + "/none-*.env: glob " + dir + "/none-*.env: file does not exist", fs.ErrNotExist},
		{fifo, fifo + " is not a regular file", nil},
		{dir, dir + " is not a regular file", nil},
		{big, big + " is 1048578 bytes: more than the 1048576 read of an environment file", nil},
		{"relative.env", "EnvironmentFile=relative.env: not an absolute path", nil},
	} {
		_, err := settings{Files: []envFile{{Path: c.path}}}.environment(readEnvFile, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("a file %s: %v; want an error saying %q", c.path, err, c.want)
		}
		// With "-", systemd skips whatever it cannot read.
		got, err := settings{Env: []string{"A=1"}, Files: []envFile{{Path: c.path, Ignore: true}}}.environment(readEnvFile, false)
		if err != nil || !slices.Equal(got, []string{"A=1"}) {
			t.Errorf("a file -%s: %q, %v; want it skipped", c.path, got, err)
		}
	}
}

func TestCheckServiceName(t *testing.T) {
	for _, name := range []string{"nginx.service", "postgresql@15-main.service", `dev-disk-by\x2dlabel.service`, "a:b_c.d-e.service"} {
		if err := CheckServiceName(name); err != nil {
			t.Errorf("CheckServiceName(%q) = %v; want it valid", name, err)
		}
	}
	for _, name := range []string{"", ".service", "nginx", "nginx.socket", "sandbox-1.scope", "getty@.service", "@x.service",
		"a b.service", "a/b.service", "../x.service", "a@b@c.service", "é.service", "a\x00.service", strings.Repeat("a", 248) + ".service"} {
		if err := CheckServiceName(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckServiceName(%q) = %v; want ErrInvalidName", name, err)
		}
	}
}
