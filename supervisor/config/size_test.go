package config

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// The spelling of sizes is sandboxd1's (tested there); what config adds is
// reading them from TOML, integers and strings alike, and refusing the
// other TOML types by name.
func TestSizeFromTOML(t *testing.T) {
	var good struct{ A, B Size }
	if _, err := toml.Decode("a = \"512M\"\nb = 1536\n", &good); err != nil || good.A != 512*MiB || good.B != 1536 {
		t.Fatalf("decoding sizes: %+v, %v; want 512MiB and 1536", good, err)
	}
	if s := (512 * MiB).String(); s != "512MiB" {
		t.Errorf("512 MiB written as %q", s)
	}
	for doc, want := range map[string]string{
		"a = -1\n":     "-1 is negative",
		"a = 1.5\n":    "the float 1.5 is not a size",
		"a = true\n":   "the boolean true is not a size",
		"a = \"lots\"": `"lots" is not a size`,
	} {
		var bad struct{ A Size }
		_, err := toml.Decode(doc, &bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("decoding %q: %v; want %q", doc, err, want)
		}
	}
}
