package egress

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct{ in, want string }{
		{"example.com:443", "example.com:443"},
		{"Example.COM:443", "example.com:443"},
		{"example.com.:443", "example.com:443"},
		{"example.com:*", "example.com:*"},
		{"example.com:0443", "example.com:443"},
		{"*.example.com:443", "*.example.com:443"},
		{"*.Example.com:*", "*.example.com:*"},
		{"_dmarc.example.com:53", "_dmarc.example.com:53"},
		{"localhost:8080", "localhost:8080"},
		{"10.1.2.3:80", "10.1.2.3:80"},
		{"10.0.0.0/8:*", "10.0.0.0/8:*"},
		{"10.1.2.3/32:80", "10.1.2.3:80"},
		{"[::1]:443", "[::1]:443"},
		{"[2001:DB8::1]:65535", "[2001:db8::1]:65535"},
		{"[fd00::/8]:*", "[fd00::/8]:*"},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3:80"},
	}
	for _, tc := range good {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if again, err := ParseRule(r.String()); err != nil || again != r {
			t.Errorf("ParseRule(%q) = %v, %v; want it to read back as %v", r.String(), again, err, r)
		}
	}

	bad := []struct{ in, want string }{
		{"example.com", `allow entry "example.com": missing ":PORT" (write example.com:443, or example.com:* for any port)`},
		{"[::1]", `missing ":PORT" (write [::1]:443`},
		{"", "empty"},
		{"example.com:", `empty port after ":" (write example.com:443`},
		{"example.com:0", `bad port "0"`},
		{"example.com:65536", `bad port "65536"`},
		{"example.com:https", `bad port "https"`},
		{"example.com:+80", `bad port "+80"`},
		{"example.com:-1", `bad port "-1"`},
		{":443", "empty host"},
		{"[]:443", "empty host"},
		{"*:443", "a bare * would allow every host"},
		{"foo.*.com:443", `"*" may only be the whole first label`},
		{"*example.com:443", `"*" may only be the whole first label`},
		{"a*.example.com:443", `"*" may only be the whole first label`},
		{"*.*.example.com:443", `"*" may only be the whole first label`},
		{"*..:443", "empty label"},
		{"a..b:443", "empty label"},
		{"-a.com:443", "starts or ends with '-'"},
		{"ex ample.com:443", "is not a DNS name"},
		{"1.2.3.256:80", "neither a DNS name nor an IP address"},
		{"10.0.0:80", "neither a DNS name nor an IP address"},
		{"::1:443", "goes in brackets"},
		{"example.com:443:80", "too many colons"},
		{"[::1:443", `missing "]"`},
		{"[::1]443", `unexpected "443" after "]"`},
		{"[10.0.0.1]:80", "brackets are only for IPv6"},
		{"[example.com]:80", "not an IPv6 address"},
		{"[10.0.0.0/8]:80", "brackets are only for IPv6"},
		{"[fe80::1%eth0]:80", "zone"},
		{"10.0.0.1/8:80", "10.0.0.1/8 has bits set past the /8; write 10.0.0.0/8"},
		{"10.0.0.0/33:80", "bad CIDR network"},
		{"[::ffff:10.0.0.0/104]:80", "without ::ffff:"},
	}
	for _, tc := range bad {
		_, err := ParseRule(tc.in)
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded, want an error", tc.in)
			continue
		}
		if !errors.Is(err, ErrBadRule) {
			t.Errorf("ParseRule(%q) = %v, not an ErrBadRule", tc.in, err)
		}
		prefix := `allow entry "` + tc.in + `": `
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
			t.Errorf("ParseRule(%q) = %q, want it to start %q and say %q", tc.in, msg, prefix, tc.want)
		}
	}
}

func TestParseAllowlistJoinsErrors(t *testing.T) {
	_, err := ParseAllowlist([]string{"ok.example:443", "nope", "bad:port", "10.0.0.0/8:*"})
	if err == nil || !errors.Is(err, ErrBadRule) {
		t.Fatalf("ParseAllowlist: %v, want ErrBadRule", err)
	}
	for _, want := range []string{`"nope"`, `"bad:port"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	list, err := ParseAllowlist([]string{"ok.example:443", "10.0.0.0/8:*"})
	if err != nil || len(list) != 2 {
		t.Fatalf("ParseAllowlist = %v, %v", list, err)
	}
}

func TestMatch(t *testing.T) {
	list, err := ParseAllowlist([]string{
		"example.com:443",
		"*.example.org:*",
		"api.example.net:8443",
		"10.1.2.3:80",
		"192.168.0.0/16:*",
		"[::1]:8080",
		"[fd00::/8]:443",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		port int
		rule string // "" for refused
	}{
		{"example.com", 443, "example.com:443"},
		{"EXAMPLE.com", 443, "example.com:443"},
		{"example.com.", 443, "example.com:443"},
		{"example.com", 80, ""},
		{"www.example.com", 443, ""},
		{"notexample.com", 443, ""},

		{"a.example.org", 1, "*.example.org:*"},
		{"a.b.example.org", 65535, "*.example.org:*"},
		{"A.Example.ORG", 443, "*.example.org:*"},
		{"example.org", 443, ""},
		{"badexample.org", 443, ""},
		{"example.org.evil", 443, ""},

		{"api.example.net", 8443, "api.example.net:8443"},
		{"api.example.net", 443, ""},

		{"10.1.2.3", 80, "10.1.2.3:80"},
		{"10.1.2.3", 81, ""},
		{"10.1.2.4", 80, ""},
		{"::ffff:10.1.2.3", 80, "10.1.2.3:80"},
		{"192.168.7.9", 22, "192.168.0.0/16:*"},
		{"192.169.0.1", 22, ""},

		{"::1", 8080, "[::1]:8080"},
		{"[::1]", 8080, "[::1]:8080"},
		{"::1", 80, ""},
		{"fd12::5", 443, "[fd00::/8]:443"},
		{"fe80::1", 443, ""},
		{"fd12::5%eth0", 443, ""},

		// A name is matched by names only, an address by addresses only.
		{"localhost", 8080, ""},
		{"", 443, ""},
		{"ex ample.com", 443, ""},
	}
	for _, tc := range tests {
		r, ok := list.Match(tc.host, tc.port)
		got := ""
		if ok {
			got = r.String()
		}
		if got != tc.rule {
			t.Errorf("Match(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.rule)
		}
	}
}
