package config

import (
	"slices"
	"strings"
	"testing"
)

func TestProjectIgnore(t *testing.T) {
	c, err := Parse([]byte(webProject+"ignore = [\"*.log\", \"/build/\", \"!keep.log\"]\n"), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"*.log", "/build/", "!keep.log"}; !slices.Equal(c.Projects[0].Ignore, want) {
		t.Errorf("ignore = %q; want %q", c.Projects[0].Ignore, want)
	}
	// A pattern that cannot mean anything is named, with its line.
	_, err = Parse([]byte(webProject+"ignore = [\n  \"*.log\",\n  \"cache[\",\n]\n"), "x.toml")
	if err == nil || !strings.Contains(err.Error(), `x.toml:6: project[0].ignore: pattern "cache[":`) {
		t.Errorf("a bad pattern: %v; want it named at line 6", err)
	}
	many := webProject + "ignore = [" + strings.Repeat(`"a",`, MaxProjectIgnore+1) + "]\n"
	if _, err := Parse([]byte(many), "x.toml"); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("too many patterns: %v", err)
	}
}
