package promote

import (
	"errors"
	"strings"
	"testing"
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
