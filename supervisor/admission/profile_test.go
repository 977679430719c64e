package admission_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/units"
)

func profiles() admission.Profiles {
	return admission.Profiles{
		Named: map[string]admission.Profile{
			"default": {Network: nsinit.NetworkNone, TTL: time.Hour, Hidden: []string{"/srv"}},
			"web": {Network: nsinit.NetworkAllowlist, Allow: []string{"example.com:443"}, DiskQuota: 1 << 30, ReadOnlyProject: true,
				Limits: units.Limits{MemoryMax: new(uint64(1 << 30)), TasksMax: new(uint64(64)), CPUQuota: new(time.Second)},
				Hidden: []string{"/root", "/home"}, ReadOnly: []string{"/etc"}},
		},
		Default: "default", Hidden: []string{"/root"}, ReadOnly: []string{"/opt"},
	}
}

func TestUnitProfilesFillWhatARequestLeavesOut(t *testing.T) {
	ps := profiles()
	r := admission.Request{Profile: "web", Limits: units.Limits{MemoryMax: new(uint64(1 << 20))}, TTL: time.Minute}
	if err := ps.Resolve(&r); err != nil {
		t.Fatal(err)
	}
	if r.Network != nsinit.NetworkAllowlist || !slices.Equal(r.Allow, []string{"example.com:443"}) || r.DiskQuota != 1<<30 || !*r.ReadOnlyProject {
		t.Fatalf("the web profile's network, disk quota and read-only project: %q %v %d %v", r.Network, r.Allow, r.DiskQuota, *r.ReadOnlyProject)
	}
	if *r.Limits.MemoryMax != 1<<20 || *r.Limits.TasksMax != 64 || *r.Limits.CPUQuota != time.Second || r.Limits.IOWeight != nil || r.TTL != time.Minute {
		t.Fatalf("limits field by field: %+v, TTL %v; want the request's MemoryMax and TTL, the profile's TasksMax and CPUQuota", r.Limits, r.TTL)
	}
	if !slices.Equal(r.Hidden, []string{"/root", "/home"}) || !slices.Equal(r.ReadOnly, []string{"/opt", "/etc"}) {
		t.Fatalf("host paths: hidden %v, read-only %v; want the host's, then the profile's, once each", r.Hidden, r.ReadOnly)
	}

	// None named: the default profile; its own settings win.
	r = admission.Request{ReadOnlyProject: new(true), DiskQuota: 5}
	if err := ps.Resolve(&r); err != nil {
		t.Fatal(err)
	}
	if r.Profile != "default" || r.Network != nsinit.NetworkNone || r.TTL != time.Hour || !*r.ReadOnlyProject || r.DiskQuota != 5 ||
		!slices.Equal(r.Hidden, []string{"/root", "/srv"}) {
		t.Fatalf("the default profile: %+v", r)
	}

	// No default profile and none named: the defaults of Profile.
	ps.Default = ""
	r = admission.Request{}
	if err := ps.Resolve(&r); err != nil || r.Profile != "" || r.Network != nsinit.NetworkNone || *r.ReadOnlyProject || r.TTL != 0 {
		t.Fatalf("no profile: %+v, %v", r, err)
	}
}

func TestUnitProfilesRefuseWhatMakesNoSense(t *testing.T) {
	for _, c := range []struct {
		r    admission.Request
		want string
	}{
		{admission.Request{Profile: "nope"}, `profile "nope" is not configured (there are: [default web])`},
		{admission.Request{Network: nsinit.NetworkNone, Allow: []string{"example.com:443"}}, `the network is "none"`},
		{admission.Request{Network: nsinit.NetworkHost, Allow: []string{"example.com:443"}}, `the network is "host"`},
		{admission.Request{Network: nsinit.NetworkAllowlist}, "an allowlist with nothing in it"},
		{admission.Request{Network: nsinit.NetworkAllowlist, Allow: []string{"example.com"}}, `allow entry "example.com"`},
		{admission.Request{Network: "wifi"}, `network "wifi": want`},
	} {
		err := profiles().Resolve(&c.r)
		if !errors.Is(err, admission.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want ErrInvalid saying %q", c.r, err, c.want)
		}
	}
	// An allowlist given is the network asked for, over the profile's.
	r := admission.Request{Allow: []string{"example.org:443"}}
	if err := profiles().Resolve(&r); err != nil || r.Network != nsinit.NetworkAllowlist || !slices.Equal(r.Allow, []string{"example.org:443"}) {
		t.Fatalf("an allowlist without a network: %q %v, %v", r.Network, r.Allow, err)
	}
	// A network given keeps the request's (empty) allowlist.
	r = admission.Request{Profile: "web", Network: nsinit.NetworkHost}
	if err := profiles().Resolve(&r); err != nil || r.Network != nsinit.NetworkHost || r.Allow != nil {
		t.Fatalf("host network over the web profile: %q %v, %v", r.Network, r.Allow, err)
	}
}

func TestUnitHostDefaultsFillWhatIsLeft(t *testing.T) {
	var r admission.Request
	admission.ApplyHostDefaults(&r, 1<<30, 4096, 1<<20)
	if *r.Limits.MemoryMax != 1<<30 || *r.Limits.TasksMax != 4096 || r.DiskQuota != 1<<20 {
		t.Fatalf("derived limits of an empty request: %+v, disk %d", r.Limits, r.DiskQuota)
	}
	r = admission.Request{Limits: units.Limits{MemoryMax: new(uint64(5)), TasksMax: new(uint64(6))}, DiskQuota: 7}
	admission.ApplyHostDefaults(&r, 1<<30, 4096, 1<<20)
	if *r.Limits.MemoryMax != 5 || *r.Limits.TasksMax != 6 || r.DiskQuota != 7 {
		t.Fatalf("a request's own limits: %+v, disk %d; want them kept", r.Limits, r.DiskQuota)
	}
	// A MemoryHigh asked for over the derived MemoryMax raises it.
	r = admission.Request{Limits: units.Limits{MemoryHigh: new(uint64(2 << 30))}}
	admission.ApplyHostDefaults(&r, 1<<30, 4096, 0)
	if *r.Limits.MemoryMax != 2<<30 {
		t.Fatalf("MemoryMax under a MemoryHigh of 2GiB: %d", *r.Limits.MemoryMax)
	}

	mem, tasks, disk := admission.HostDefaults(t.TempDir())
	if mem == 0 || mem > 4<<30 || tasks == 0 || tasks > sandboxd1.DefaultTasksMax || disk == 0 {
		t.Fatalf("HostDefaults of a directory: %d, %d, %d; want MemoryMax in (0, 4GiB], TasksMax in (0, %d], a disk quota", mem, tasks, disk, sandboxd1.DefaultTasksMax)
	}
	// sandboxctl's --help says sandboxd1's number: the derived one is it
	// wherever pid_max does not make it less.
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); n/8 >= sandboxd1.DefaultTasksMax && tasks != sandboxd1.DefaultTasksMax {
			t.Fatalf("HostDefaults' TasksMax is %d; sandboxctl --help says sandboxd1.DefaultTasksMax, %d", tasks, sandboxd1.DefaultTasksMax)
		}
	}
	if _, _, disk := admission.HostDefaults(filepath.Join("pool", "sandboxes")); disk != 0 {
		t.Fatalf("HostDefaults of a dataset's name: disk %d; want 0 (not measured)", disk)
	}
}
