package nsinit

import (
	"os"

	"github.com/sandboxd/sandboxd/runtime/nsinit/cgroup"
)

// A command's cgroup is runtime/nsinit/cgroup's (both ends); the daemon
// names it here.

// CommandCgroup is a command's cgroup, made by the daemon, whose
// descriptors the init gets with the request (Request.Cgroup).
type CommandCgroup = cgroup.Command

// NewCommandCgroup makes cgroup name beside the processes of init pid
// (a child of its cgroup v2 cgroup, its sandbox's scope).
func NewCommandCgroup(pid int, name string) (*CommandCgroup, error) {
	return cgroup.NewCommand(pid, name)
}

// BootCgroups makes a booted sandbox's cgroups under the scope of init
// pid, and returns the payload's cgroup.procs opened for writing (see
// cgroup.Boot).
func BootCgroups(pid int, uid, gid uint32) (*os.File, error) { return cgroup.Boot(pid, uid, gid) }
