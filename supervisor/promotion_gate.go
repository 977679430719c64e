package supervisor

// The per-project gate: one promotion of a project at a time, and sandbox
// creates wait while a stage writes or checks the project.

import (
	"sync"
)

// projectGate keeps sandbox creates from snapshotting a project while a
// promotion writes it or checks it: a new sandbox gets the project from
// before the promotion's stage or from after it, never between.
type projectGate struct {
	mu    sync.Mutex
	gates map[string]*sync.RWMutex
	busy  map[string]string // project -> the promotion under way
}

func (g *projectGate) of(project string) *sync.RWMutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.RWMutex{}
	}
	m, ok := g.gates[project]
	if !ok {
		m = &sync.RWMutex{}
		g.gates[project] = m
	}
	return m
}

// claim marks project as being promoted by pid, or says who is.
func (g *projectGate) claim(project, pid string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy == nil {
		g.busy = map[string]string{}
	}
	if other, ok := g.busy[project]; ok {
		return other, false
	}
	g.busy[project] = pid
	return "", true
}

func (g *projectGate) release(project string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.busy, project)
}
