package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/promote/replica"
)

// A stage target is read at load as the promotion reads it
// (replica.ParseTarget): one the promotion would refuse is refused at
// load, with ParseTarget's own error, and never starts the daemon to fail
// at promotion.
func TestStageTargetsAreReadAsThePromotionReadsThem(t *testing.T) {
	for _, target := range []string{
		"ssh://-oProxyCommand=sh/srv/app",  // a host ssh would read as an option
		"ssh://-l@host/srv/app",            // and a user
		"ssh://deploy:secret@host/srv/app", // a password
		"ssh://host:99999/srv/app",         // a port out of range
		"ssh://host:/srv/app",              // an empty port
		"ssh://::1/srv/app",                // an unbracketed IPv6 address
		"ssh://h;rm/srv/app",               // a host with a shell character
		"ssh://host/srv/app?x=1",           // a query
		"ssh://host/",                      // the root directory
		"/",                                // the same here
		"/srv/a\x01b",                      // a control character
		"SSH2://host/srv/app",              // another scheme
	} {
		_, perr := replica.ParseTarget(target)
		if perr == nil {
			t.Fatalf("the test's target %q: ParseTarget takes it", target)
		}
		in := "[[stage]]\nname = \"p\"\ntarget = \"project\"\n[[stage]]\nname = \"s\"\ntarget = " + tomlString(target) + "\n"
		_, err := Parse([]byte(in), "x.toml")
		if err == nil {
			t.Errorf("target %q: the config loads; ParseTarget refuses it: %v", target, perr)
			continue
		}
		if !errors.Is(err, replica.ErrInvalidTarget) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), perr.Error()) ||
			!strings.HasPrefix(err.Error(), "x.toml:6: stage[1].target: ") {
			t.Errorf("target %q: the config's error is %q; want at x.toml:6, stage[1].target, wrapping ErrInvalid and ParseTarget's %q", target, err, perr)
		}
	}
	// {project} stands for a project's name in every part of a target.
	for _, target := range []string{"/srv/{project}", "ssh://deploy@{project}.example.com:2222/srv/{project}", "ssh://[::1]/srv/{project}"} {
		in := "[[stage]]\nname = \"p\"\ntarget = \"project\"\n[[stage]]\nname = \"s\"\ntarget = " + tomlString(target) + "\n"
		if _, err := Parse([]byte(in), "x.toml"); err != nil {
			t.Errorf("target %q: %v", target, err)
		}
	}
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\x01", `\u0001`)
	return `"` + r.Replace(s) + `"`
}
