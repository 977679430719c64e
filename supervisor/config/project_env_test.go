package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

const webProject = "[[project]]\nname = \"web\"\npath = \"/srv/web\"\n"

func TestProjectEnvAndUnits(t *testing.T) {
	in := webProject + `units = ["nginx.service", "postgresql@15-main.service"]
env = [
  "APP_ENV=staging",   # a comment
  'QUOTED=a "b" c',
  """MULTI=one
two""",
  "EMPTY=",
  "WITH_EQUALS=a=b",
]
`
	c, err := Parse([]byte(in), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Projects[0]
	if want := []string{"nginx.service", "postgresql@15-main.service"}; !slices.Equal(p.Units, want) {
		t.Errorf("units = %q; want %q", p.Units, want)
	}
	if want := []string{"APP_ENV=staging", `QUOTED=a "b" c`, "MULTI=one\ntwo", "EMPTY=", "WITH_EQUALS=a=b"}; !slices.Equal(p.Env, want) {
		t.Errorf("env = %q; want %q", p.Env, want)
	}
}

func TestProjectEnvAndUnitsBad(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		var items []string
		for i := range n {
			items = append(items, fmt.Sprintf("%q", f(i)))
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"no '='", webProject + "env = [\"A=1\", \"JUSTANAME\"]\n",
			[]string{`x.toml:4: project[0].env holds "JUSTANAME": want KEY=value entries, KEY of letters, digits and '_', not starting with a digit`}},
		{"bad name", webProject + "env = [\n  \"A=1\",\n  \"MY-VAR=1\",\n]\n",
			[]string{`x.toml:6: project[0].env holds "MY-VAR=1": want KEY=value`}},
		{"name starting with a digit", webProject + "env = [\"1A=1\"]\n", []string{`x.toml:4: project[0].env holds "1A=1"`}},
		{"empty name", webProject + "env = [\"=1\"]\n", []string{`x.toml:4: project[0].env holds "=1"`}},
		{"NUL", webProject + "env = [\"A=x\\u0000y\"]\n",
			[]string{`x.toml:4: project[0].env sets A to a value with a NUL byte`}},
		{"duplicate on two lines", webProject + "env = [\n  \"A=1\",\n  # the same again\n  \"B=2\", 'A=3',\n]\n",
			[]string{`x.toml:7: project[0].env sets A twice (lines 5 and 7: "A=1" and "A=3"): set each variable once`}},
		{"duplicate on one line", webProject + "env = [\"A=1\", \"A=1\"]\n",
			[]string{`x.toml:4: project[0].env sets A twice (both on line 4: "A=1" and "A=1")`}},
		{"duplicate after a multi-line string", webProject + "env = [\"\"\"A=1\n\\\n2\"\"\",\n\"B=\\\"x\\\"\",\n  \"A=2\"]\n",
			[]string{`x.toml:8: project[0].env sets A twice (lines 4 and 8`}},
		{"duplicate in a later project", webProject + "[[project]]\nname = \"db\"\npath = \"/srv/db\"\nenv = [\"X=1\",\n\"X=2\"]\n",
			[]string{`x.toml:8: project[1].env sets X twice (lines 7 and 8`}},
		{"too many", webProject + "env = " + many(MaxProjectEnv+1, func(i int) string { return fmt.Sprintf("V%d=1", i) }) + "\n",
			[]string{`x.toml:4: project[0].env has 257 entries: at most 256`}},
		{"too large", webProject + "env = " + many(2, func(i int) string { return fmt.Sprintf("V%d=%s", i, strings.Repeat("x", 40<<10)) }) + "\n",
			[]string{`x.toml:4: project[0].env holds 81926 bytes: at most 65536`}},
		{"not a list", webProject + "env = \"A=1\"\n", []string{`x.toml:4: project[0].env: want an array, not a string`}},

		{"unit without a type", webProject + "units = [\"nginx\"]\n",
			[]string{`x.toml:4: project[0].units holds "nginx", which is not a service's unit name`, `does not end in ".service"`, `like "nginx.service"`}},
		{"a socket", webProject + "units = [\"nginx.service\",\n \"nginx.socket\"]\n", []string{`x.toml:5: project[0].units holds "nginx.socket"`}},
		{"a template", webProject + "units = [\"getty@.service\"]\n", []string{`x.toml:4:`, `"getty@.service" is a template`}},
		{"a path", webProject + "units = [\"../nginx.service\"]\n", []string{`x.toml:4:`, `holds '/'`}},
		{"a unit twice", webProject + "units = [\"a.service\", \"b.service\",\n \"a.service\"]\n",
			[]string{`x.toml:5: project[0].units lists "a.service" twice (lines 4 and 5): list each unit once`}},
		{"too many units", webProject + "units = " + many(17, func(i int) string { return fmt.Sprintf("u%d.service", i) }) + "\n",
			[]string{`x.toml:4: project[0].units lists 17 units: at most 16`}},
	} {
		t.Run(c.name, func(t *testing.T) { wantParseError(t, c.in, c.want) })
	}
}

func TestProjectUnitErrorsCarryTheirCause(t *testing.T) {
	_, err := Parse([]byte(webProject+"units = [\"nginx\"]\n"), "x.toml")
	if !errors.Is(err, units.ErrInvalidName) {
		t.Errorf("a bad unit name: %v does not wrap units.ErrInvalidName", err)
	}
}

// Without a file (Validate), the same checks hold, with no lines.
func TestValidateProjectEnvWithoutFile(t *testing.T) {
	c := Default()
	c.Projects = []Project{{Name: "web", Path: "/srv/web", Env: []string{"A=1", "A=2"}, Units: []string{"x"}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `project[0].env sets A twice (in the same list: "A=1" and "A=2")`) ||
		!strings.Contains(err.Error(), `project[0].units holds "x"`) {
		t.Errorf("Validate() = %v", err)
	}
}
