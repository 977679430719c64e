package config

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	for _, in := range []struct{ toml, listen, group string }{
		{"", "", ""},
		{"[metrics]\nlisten = \"unix:/run/sandboxd/metrics.sock\"\ngroup = \"adm\"\n", "unix:/run/sandboxd/metrics.sock", "adm"},
		{"[metrics]\nlisten = \"unix:/run/sandboxd/metrics.sock\"\ngroup = \"4\"\n", "unix:/run/sandboxd/metrics.sock", "4"},
		{"[metrics]\nlisten = \"127.0.0.1:9477\"\n", "127.0.0.1:9477", ""},
		{"[metrics]\nlisten = \"[::1]:9477\"\n", "[::1]:9477", ""},
	} {
		c, err := Parse([]byte(in.toml), "x.toml")
		if err != nil {
			t.Errorf("%q: %v", in.toml, err)
			continue
		}
		if c.Metrics.Listen != in.listen || c.Metrics.Group != in.group {
			t.Errorf("%q: metrics %+v", in.toml, c.Metrics)
		}
	}
}

// A listen address other hosts reach is refused at load, naming the key
// and why.
func TestParseMetricsRefusesTheNetwork(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"[metrics]\nlisten = \"0.0.0.0:9477\"\n", []string{"x.toml:2:", "metrics.listen", `"0.0.0.0:9477" is not a loopback address`, "not for the network"}},
		{"[metrics]\nlisten = \":9477\"\n", []string{"metrics.listen", "not a loopback address"}},
		{"[metrics]\nlisten = \"192.168.1.5:9477\"\n", []string{"metrics.listen", "not a loopback address"}},
		{"[metrics]\nlisten = \"localhost:9477\"\n", []string{"metrics.listen", "a host name is refused"}},
		{"[metrics]\nlisten = \"127.0.0.1\"\n", []string{"metrics.listen", "want \"unix:/path\" or a loopback IP and port"}},
		{"[metrics]\nlisten = \"127.0.0.1:0\"\n", []string{"metrics.listen", "want \"unix:/path\""}},
		{"[metrics]\nlisten = \"unix:metrics.sock\"\n", []string{"metrics.listen", "absolute, clean path"}},
		{"[metrics]\nlisten = \"unix:/run/../tmp/m.sock\"\n", []string{"metrics.listen", "absolute, clean path"}},
		{"[metrics]\nlisten = \"unix:/run/m.sock\"\ngroup = \"a b\"\n", []string{"x.toml:3:", "metrics.group", "not a group name"}},
		{"[metrics]\nlisten = \"127.0.0.1:9477\"\ngroup = \"adm\"\n", []string{"metrics.group", "only a unix socket has a group"}},
		{"[metrics]\nlisten = \"127.0.0.1:9477\"\nport = 1\n", []string{"unknown key metrics.port", "allowed in metrics: listen, group"}},
	} {
		_, err := Parse([]byte(c.in), "x.toml")
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: error %v, want one wrapping ErrInvalid", c.in, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error\n%v\ndoes not say %q", c.in, err, w)
			}
		}
	}
}
