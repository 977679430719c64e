package api

import (
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/calls"
)

// servedActions are the actions the objects' methods are called as: every
// exported method that godbus exports (it returns *dbus.Error last),
// those of Properties as "Properties.<method>".
func servedActions(t *testing.T) map[string]bool {
	t.Helper()
	derr := reflect.TypeFor[*dbus.Error]()
	served := map[string]bool{}
	for _, obj := range []struct {
		v      any
		prefix string
	}{{manager{}, ""}, {sandboxObject{}, ""}, {sandboxProperties{}, "Properties."}, {sandboxIntrospectable{}, ""}} {
		typ := reflect.TypeOf(obj.v)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			if n := m.Type.NumOut(); n > 0 && m.Type.Out(n-1) == derr {
				served[obj.prefix+m.Name] = true
			}
		}
	}
	if len(served) < 30 {
		t.Fatalf("found only %d served methods: %v", len(served), served)
	}
	return served
}

// Every method a caller can call is in the action table, so it is
// journaled and limited as the table says; and the table names no method
// that is not served.
func TestEveryServedMethodIsInTheActionTable(t *testing.T) {
	served := servedActions(t)
	for name := range served {
		if !calls.Known(name) {
			t.Errorf("method %s is served but not in actions (calls/actions.go): say whether it is mutating and heavy", name)
		}
	}
	for _, name := range calls.Names() {
		if !served[name] {
			t.Errorf("actions names %s, which no object serves", name)
		}
	}
}

// The calls that change something are journaled when they succeed: the
// ones mutating() once left out among them.
func TestMutatingCallsAreJournaled(t *testing.T) {
	for _, name := range []string{
		sandboxd1.MethodCreateSandbox, sandboxd1.MethodDestroySandbox, sandboxd1.MethodDestroy,
		sandboxd1.MethodExec, sandboxd1.MethodExecTerminal, sandboxd1.MethodSignal,
		sandboxd1.MethodFreeze, sandboxd1.MethodThaw, sandboxd1.MethodCheckpoint, sandboxd1.MethodDeleteCheckpoint,
		sandboxd1.MethodRollback, sandboxd1.MethodAddProject, sandboxd1.MethodAddProjectWithOptions, sandboxd1.MethodRemoveProject,
		// Left out before the table.
		sandboxd1.MethodPromote, sandboxd1.MethodApprovePromotion, sandboxd1.MethodApprovePromotionWithOptions, sandboxd1.MethodRejectPromotion,
		sandboxd1.MethodRebase, sandboxd1.MethodTry,
	} {
		if !calls.Mutating(name) {
			t.Errorf("%s is not journaled when it succeeds", name)
		}
	}
	for _, name := range []string{sandboxd1.MethodListSandboxes, sandboxd1.MethodGetPromotion, sandboxd1.MethodDiff, "Properties.Get", "Introspect"} {
		if calls.Mutating(name) {
			t.Errorf("%s, a read, is journaled at info level", name)
		}
	}
	if !calls.Mutating("SomethingNew") {
		t.Error("a call the table does not know is not journaled")
	}
	for _, name := range []string{"UnifiedDiff", "Diff", "Try", "Promote", "ProjectChanges"} {
		if !calls.Heavy(name) {
			t.Errorf("%s is not a heavy call", name)
		}
	}
	if got, want := calls.HeavyNames(), "AdoptProject, Diff, DiffCounted, EditFile, FileVersions, Fork, ListFiles, Merge, ProjectChanges, Promote, PromotionDiff, ReadFile, ReadFileTo, ReleaseProject, SystemStatus, Try, UnifiedDiff, WriteFile and WriteFileFrom"; got != want {
		t.Errorf("calls.HeavyNames() = %q; want %q", got, want)
	}
}
