package main

import (
	"slices"
	"strings"
	"testing"
)

func TestProjectListTakesNamesAroundSpaces(t *testing.T) {
	for flag, want := range map[string][]string{
		"":          nil,
		"web":       {"web"},
		"web,api":   {"web", "api"},
		"web, api ": {"web", "api"},
	} {
		got, err := projectList(flag)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("projectList(%q) = %q, %v; want %q", flag, got, err, want)
		}
	}
	for _, flag := range []string{"web,", ",web", "web,,api", " "} {
		if _, err := projectList(flag); err == nil || !strings.Contains(err.Error(), "empty project name") {
			t.Errorf("projectList(%q) = %v; want an error naming the empty name", flag, err)
		}
	}
}
