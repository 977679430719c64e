package promotion

// The planner: the configured stages, each made once into a Stage of its
// kind, which the driver (driver.go) runs in order.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// StageConfig is a configured stage (sandboxd.toml's [[stage]]).
type StageConfig struct {
	Name string
	// Target is "project", a path on this host, or an ssh:// address;
	// "{project}" is replaced by the project's name.
	Target       string
	Checks       []string
	CheckTimeout time.Duration // 0: defaultCheckTimeout
	// Admin: an admin approves the stage before anything is applied to it.
	Admin      bool
	SSHOptions []string
}

// Kind is what a stage carries the change to.
type Kind string

const (
	// KindProject: the project itself, written in place; its checks run
	// in a sandbox of it.
	KindProject Kind = "project"
	// KindPath: a replica of the promoted project in a directory of this
	// host (a btrfs subvolume received there).
	KindPath Kind = "path"
	// KindReplica: a replica of the promoted project on another host,
	// over ssh.
	KindReplica Kind = "replica"
)

// kindOf is the kind of a stage whose target is target.
func kindOf(target string) Kind {
	switch {
	case target == "project":
		return KindProject
	case strings.HasPrefix(target, "/"):
		return KindPath
	}
	return KindReplica
}

// Stage is one stage of the plan. The driver runs its steps in order:
// Apply, Check, Keep, then (the stage's pass recorded) Done; a failure
// of Apply, Check or Keep runs what Apply added to the run's undo.
type Stage interface {
	Config() StageConfig
	Kind() Kind
	// Apply takes the stage's rollback point and writes the change set
	// to the stage, recording each step before it takes it (I5); it adds
	// to r what undoes it.
	Apply(ctx context.Context, r *stageRun) error
	// Check runs the stage's checks on what Apply wrote: an error fails
	// the stage.
	Check(ctx context.Context, r *stageRun) error
	// Keep makes what the next stages need of this one, once checked.
	Keep(ctx context.Context, r *stageRun) error
	// Done lets go of what the stage, passed, no longer needs.
	Done(ctx context.Context, r *stageRun)
	// Revert puts stage i of p back to its rollback point after a crash
	// cut it short, from its record alone.
	Revert(ctx context.Context, p *Promotion, i int) error
}

// plan is the configured stages as Stages, in order: the project alone
// when none is configured.
type plan []Stage

// newPlan makes each configured stage into a Stage of its kind.
func newPlan(r *Promotions, stages []StageConfig) plan {
	if len(stages) == 0 {
		stages = []StageConfig{{Name: "project", Target: "project"}}
	}
	replicas := false
	for _, st := range stages {
		replicas = replicas || kindOf(st.Target) != KindProject
	}
	var out plan
	for _, st := range stages {
		switch kind := kindOf(st.Target); kind {
		case KindProject:
			out = append(out, &projectStage{r: r, cfg: st, keepPromoted: replicas})
		case KindPath:
			out = append(out, &pathStage{replicaStage{r: r, cfg: st, kind: kind}})
		default:
			out = append(out, &replicaStage{r: r, cfg: st, kind: kind})
		}
	}
	return out
}

// index is the index of the stage called name, or -1.
func (pl plan) index(name string) int {
	for i, st := range pl {
		if st.Config().Name == name {
			return i
		}
	}
	return -1
}

func (pl plan) names() string {
	names := make([]string, len(pl))
	for i, st := range pl {
		names[i] = st.Config().Name
	}
	return strings.Join(names, ", ")
}

// ReplicaChecksProblem says why stage st may not have checks (nil: it may):
// only a project stage's checks run in a sandbox.
func ReplicaChecksProblem(st StageConfig) error {
	if st.Target == "project" || len(st.Checks) == 0 {
		return nil
	}
	return fmt.Errorf("the checks of stage %s (target %s) would run outside a sandbox: not supported; put checks on the project stage: %w",
		st.Name, st.Target, ErrChecksOutsideSandbox)
}

// stageTarget is st's target for project.
func stageTarget(st StageConfig, project string) string {
	return strings.ReplaceAll(st.Target, "{project}", project)
}

// checkTimeout is how long each of st's checks may run.
func checkTimeout(st StageConfig) time.Duration {
	if st.CheckTimeout == 0 {
		return defaultCheckTimeout
	}
	return st.CheckTimeout
}

// ensure the kinds are Stages.
var (
	_ Stage = (*projectStage)(nil)
	_ Stage = (*pathStage)(nil)
	_ Stage = (*replicaStage)(nil)
)
