package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/config"
)

func TestTheBuiltInProfilesReachTheSupervisor(t *testing.T) {
	got, err := profiles(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	u, ok := got["untrusted"]
	if !ok || u.Network != "none" || u.Limits.MemoryMax == nil || *u.Limits.MemoryMax != 512<<20 ||
		u.Limits.TasksMax == nil || *u.Limits.TasksMax != 256 || u.Limits.CPUQuota == nil || *u.Limits.CPUQuota != time.Second ||
		u.Limits.RuntimeMax == nil || *u.Limits.RuntimeMax != time.Hour || u.DiskQuota != 1<<30 || u.TTL != time.Hour {
		t.Errorf("profile untrusted: %+v", u)
	}
	if tr := got["trusted"]; tr.Network != "host" || tr.Limits.MemoryMax != nil {
		t.Errorf("profile trusted: %+v", tr)
	}
	if d := got["default"]; d.Network != "none" {
		t.Errorf("profile default: %+v", d)
	}
}

func TestABadAllowlistEntryIsAConfigurationError(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[profile.ci]
network = "allowlist"
allow = ["pypi.org:443", "*.bad*.example:443"]
`), "sandboxd.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = profiles(cfg)
	if err == nil || !strings.Contains(err.Error(), "profile ci") || !strings.Contains(err.Error(), `"*.bad*.example:443"`) {
		t.Errorf("a bad allowlist entry: %v; want the profile and the entry named", err)
	}
	cfg, err = config.Parse([]byte(`
[profile.ci]
network = "allowlist"
allow = ["pypi.org:443", "10.0.0.0/8:*"]
cpu_quota = "50%"
`), "sandboxd.toml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := profiles(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ci := got["ci"]; ci.Network != "allowlist" || len(ci.Allow) != 2 || *ci.Limits.CPUQuota != 500*time.Millisecond {
		t.Errorf("profile ci: %+v", ci)
	}
}
