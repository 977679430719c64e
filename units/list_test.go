package units_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

func TestListFindsScopesByPattern(t *testing.T) {
	t.Parallel()
	m := connect(t)
	for _, name := range []string{"units-test-list-a.scope", "units-test-list-b.scope", "units-test-unlisted.scope"} {
		p := start(t, "sleep", "300")
		startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}, Description: "listed " + name})
	}
	found, err := m.List(context.Background(), "units-test-list-*.scope")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(found, func(a, b units.UnitState) int { return strings.Compare(a.Name, b.Name) })
	want := []units.UnitState{
		{Name: "units-test-list-a.scope", Description: "listed units-test-list-a.scope", ActiveState: "active", SubState: "running"},
		{Name: "units-test-list-b.scope", Description: "listed units-test-list-b.scope", ActiveState: "active", SubState: "running"},
	}
	if !slices.Equal(found, want) {
		t.Fatalf("List(units-test-list-*.scope) = %+v; want %+v", found, want)
	}
}
