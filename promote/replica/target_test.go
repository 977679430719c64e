package replica

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReplicaParseTargetAccepts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
		str  string // String(), when not in
	}{
		{"project", Target{Kind: TargetProject}, ""},
		{"/srv/staging/app", Target{Kind: TargetPath, Path: "/srv/staging/app"}, ""},
		{"/srv//staging/./app/", Target{Kind: TargetPath, Path: "/srv/staging/app"}, "/srv/staging/app"},
		{"/srv/it's here", Target{Kind: TargetPath, Path: "/srv/it's here"}, ""},
		{"ssh://host/srv/app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, ""},
		{"ssh://deploy@stage.example.com:2222/srv/app", Target{Kind: TargetSSH, User: "deploy", Host: "stage.example.com", Port: "2222", Path: "/srv/app"}, ""},
		{"ssh://root@127.0.0.1:22/mnt/x/app", Target{Kind: TargetSSH, User: "root", Host: "127.0.0.1", Port: "22", Path: "/mnt/x/app"}, ""},
		{"ssh://[::1]:2200/srv/app", Target{Kind: TargetSSH, Host: "::1", Port: "2200", Path: "/srv/app"}, ""},
		{"SSH://host/srv/app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, "ssh://host/srv/app"},
		{"ssh://host/srv/my%20app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/my app"}, ""},
		{"ssh://host/srv/app/", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, "ssh://host/srv/app"},
	} {
		got, err := ParseTarget(tc.in)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseTarget(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		str := tc.str
		if str == "" {
			str = tc.in
		}
		if got.String() != str {
			t.Errorf("ParseTarget(%q).String() = %q, want %q", tc.in, got.String(), str)
		}
		again, err := ParseTarget(got.String())
		if err != nil || again != got {
			t.Errorf("ParseTarget(%q) does not read back what String wrote (%q): %#v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestReplicaParseTargetRejects(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"srv/app", "relative path"},
		{"./app", "relative path"},
		{"app", "relative path"},
		{"/srv/../etc", `".." component`},
		{"/srv/app/..", `".." component`},
		{"/", "root directory"},
		{"//", "root directory"},
		{"/srv/a\nb", "control character"},
		{"ssh://", "empty host"},
		{"ssh:///srv/app", "empty host"},
		{"ssh://root@/srv/app", "empty host"},
		{"ssh://@host/srv/app", "empty user"},
		{"ssh://host:0/srv/app", "bad port"},
		{"ssh://host:70000/srv/app", "bad port"},
		{"ssh://host:22x/srv/app", "invalid port"},
		{"ssh://host:/srv/app", "empty port"},
		{"ssh://host", "no path"},
		{"ssh://host/", "root directory"},
		{"ssh://host/srv/../etc", `".." component`},
		{"ssh://host/srv/a%0Ab", "control character"},
		{"ssh://host/srv/app?x=1", "query or fragment"},
		{"ssh://host/srv/app#x", "query or fragment"},
		{"ssh://user:secret@host/srv/app", "password"},
		{"ssh://-oProxyCommand=evil/srv/app", "starts with '-'"},
		{"ssh://-l@host/srv/app", "starts with '-'"},
		{"ssh://us$er@host/srv/app", "holds '$'"},
		{"ssh://ho_st!/srv/app", "holds '!'"},
		{"rsync://host/srv/app", `unknown scheme "rsync"`},
		{"file:///srv/app", `unknown scheme "file"`},
		{"host:/srv/app", "relative path"},
	} {
		got, err := ParseTarget(tc.in)
		if err == nil {
			t.Errorf("ParseTarget(%q) = %#v; want an error (%s)", tc.in, got, tc.why)
			continue
		}
		if !errors.Is(err, ErrInvalidTarget) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseTarget(%q): %v; want ErrInvalidTarget saying %q", tc.in, err, tc.why)
		}
		if tc.in != "" && !strings.Contains(err.Error(), strings.ReplaceAll(tc.in, "\n", `\n`)) {
			t.Errorf("ParseTarget(%q): %v; want the error to quote the target", tc.in, err)
		}
	}
}

// maxInput bounds FuzzParseTarget's inputs: Go minimizes an interesting
// input by trying it without each span of its bytes, which takes the
// square of its length in runs, and a few long ones leave a 10 s run no
// time to fuzz. Longer inputs are skipped; they are never interesting.
// The fuzz target needs no testbed, but the package's TestMain boots one:
// under -fuzz the coordinator and its workers run inside it.
const maxInput = 256

// FuzzParseTarget: a target that parses is valid (validate), its path is
// absolute and clean with no ".." element and is not "/", its user and
// host cannot be read as ssh options, and String writes it back as text
// that parses to the same Target (and writes the same again). A refusal
// wraps ErrInvalidTarget and is valid UTF-8.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"project", "/srv/staging/app", "/srv//staging/./app/", "/srv/it's here",
		"ssh://host/srv/app", "ssh://deploy@stage.example.com:2222/srv/app", "ssh://[::1]:2200/srv/app",
		"SSH://host/srv/app", "ssh://host/srv/my%20app", "ssh://host/srv/a%2Fb", "ssh://h/a?b", "ssh://h/a#b",
		"", "srv/app", "/", "/srv/../etc", "/srv/a\nb", "ssh://host", "ssh://-oProxyCommand=x/srv",
		"ssh://u:pw@h/p", "ssh://@h/p", "ssh://h:0/p", "ssh://h:022/p", "ssh://h:/p", "ssh://h/../p",
		"ssh://[fe80::1%25eth0]/p", "ssh://%2Dx@h/p", "http://h/p", "Project",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxInput {
			return
		}
		tg, err := ParseTarget(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("ParseTarget(%q): %v does not wrap ErrInvalidTarget", s, err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("ParseTarget(%q): the message %q is not valid UTF-8", s, err)
			}
			return
		}
		if err := tg.validate(); err != nil {
			t.Fatalf("ParseTarget(%q) = %#v, which validate refuses: %v", s, tg, err)
		}
		switch tg.Kind {
		case TargetProject:
			if s != "project" {
				t.Fatalf("ParseTarget(%q) = the project", s)
			}
		case TargetPath, TargetSSH:
			p := tg.Path
			if !path.IsAbs(p) || path.Clean(p) != p || p == "/" || slices.Contains(strings.Split(p, "/"), "..") {
				t.Fatalf("ParseTarget(%q): path %q is not absolute, clean, below / and free of \"..\"", s, p)
			}
			if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("ParseTarget(%q): path %q holds a control character", s, p)
			}
			if tg.Kind == TargetSSH && (tg.Host == "" || strings.HasPrefix(tg.Host, "-") || strings.HasPrefix(tg.User, "-")) {
				t.Fatalf("ParseTarget(%q): user %q or host %q is empty or could be read as an option", s, tg.User, tg.Host)
			}
		default:
			t.Fatalf("ParseTarget(%q): kind %v", s, tg.Kind)
		}
		str := tg.String()
		again, err := ParseTarget(str)
		if err != nil {
			t.Fatalf("ParseTarget(%q) = %#v, whose String %q does not parse: %v", s, tg, str, err)
		}
		if again != tg {
			t.Fatalf("ParseTarget(%q) = %#v; its String %q parses to %#v", s, tg, str, again)
		}
		if again.String() != str {
			t.Fatalf("ParseTarget(%q): String %q, then %q", s, str, again.String())
		}
	})
}
