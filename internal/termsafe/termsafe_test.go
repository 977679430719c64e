package termsafe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLineEscapesWhatActsOnATerminal(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain name.txt", "plain name.txt"},
		{"café, 日本語, ü", "café, 日本語, ü"},
		{"a\nstage project (project): passed", `a\nstage project (project): passed`},
		{"\x1b[2J", `\x1b[2J`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"over\rwrite", `over\rwrite`},
		{"tab\there", `tab\there`},
		{"del\x7f nul\x00", `del\x7f nul\x00`},
		{"c1 \u009b31m \u0085", `c1 \u009b31m \u0085`},
		{"txt\u202eexe.sh", `txt\u202eexe.sh`},
		{"\u2066iso\u2069 \u200b \ufeff \u2028", `\u2066iso\u2069 \u200b \ufeff \u2028`},
		{"latin\xe9.txt", `latin\xe9.txt`},
		{`back\slash`, `back\\slash`},
		{`fake\n`, `fake\\n`},
	} {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

// Whatever the input, the output is valid UTF-8 with no control, format or
// separator character: nothing a terminal acts on, no second line.
func TestLineOutputIsAlwaysOnePrintableLine(t *testing.T) {
	var all []byte
	for b := 0; b < 256; b++ {
		all = append(all, byte(b))
	}
	inputs := []string{string(all), "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"}
	for r := rune(0); r < 0x3000; r++ {
		inputs = append(inputs, string(r))
	}
	for _, in := range inputs {
		for name, f := range map[string]func(string) string{"Line": Line, "Text": Text, "Path": Path} {
			out := f(in)
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: not UTF-8", name, in, out)
			}
			for _, r := range out {
				if unsafe(r) && !(name == "Text" && r == '\t') {
					t.Fatalf("%s(%q) = %q holds %U", name, in, out, r)
				}
			}
		}
	}
}

func TestTextKeepsBackslashesAndLeavesLinesOutputAlone(t *testing.T) {
	if got := Text("no sandbox \"x\\n\"\tnow\n\x1b[1A"); got != `no sandbox "x\n"`+"\t"+`now\n\x1b[1A` {
		t.Errorf("Text: %q", got)
	}
	for _, s := range []string{"a\nb\\c\x1b", "\u202e\xff\t"} {
		if once := Line(s); Text(once) != once {
			t.Errorf("Text(Line(%q)) = %q; want %q", s, Text(once), once)
		}
	}
}

func TestLinesPrefixesEachLineSoNoneFakesAHeader(t *testing.T) {
	out := "ok 1\r\n\x1b]0;pwned\x07\nstage project (project): passed\n\nlast\rfake"
	got := Lines(out, "    | ")
	want := []string{"    | ok 1", `    | \x1b]0;pwned\a`, "    | stage project (project): passed", "    | ", `    | last\rfake`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if Lines("", "| ") != nil || len(Lines("one\n", "| ")) != 1 {
		t.Errorf("Lines of nothing or of one line ended by a line break")
	}
}

// Path quotes as git does (core.quotePath=false): C escapes and octal
// bytes in double quotes, only when needed.
func TestPathQuotesAsGitDoes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"src/main.go", "src/main.go"},
		{"dir with space/ü.txt", "dir with space/ü.txt"},
		{"a\nb", `"a\nb"`},
		{"\x1b[2J", `"\033[2J"`},
		{"x\u202etxt.exe", `"x\342\200\256txt.exe"`},
		{"latin\xe9", `"latin\351"`},
		{`say "hi"`, `"say \"hi\""`},
		{`back\slash`, `"back\\slash"`},
		{"t\tab", `"t\tab"`},
	} {
		if got := Path(c.in); got != c.want {
			t.Errorf("Path(%q) = %s; want %s", c.in, got, c.want)
		}
	}
}

func FuzzLine(f *testing.F) {
	f.Add("a\nb\x1b[2J\u202e\xff\\")
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Line(s), Text(s), Path(s)} {
			if strings.ContainsAny(out, "\n\r\x1b\x07\x00\u202e\u2066") || !utf8.ValidString(out) {
				t.Fatalf("%q became %q", s, out)
			}
		}
		if once := Line(s); Text(once) != once {
			t.Fatalf("Text changed Line's output %q", once)
		}
	})
}

func TestJSONEscapesWhatEncodingJSONLeavesRaw(t *testing.T) {
	line, err := json.Marshal(map[string]string{"path": "a\x7f\u009b2J\u202etxt\U000e0041\n"})
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(append(line, '\n'))
	want := `{"path":"a\u007f\u009b2J\u202etxt\udb40\udc41\n"}` + "\n"
	if string(got) != want {
		t.Fatalf("JSON: %s; want %s", got, want)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["path"] != "a\x7f\u009b2J\u202etxt\U000e0041\n" {
		t.Fatalf("the escaped line reads back as %q (%v)", back["path"], err)
	}
}
