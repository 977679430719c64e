package units_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

func TestLimitsValidateNamesTheFieldAtFault(t *testing.T) {
	for _, c := range []struct {
		limits units.Limits
		field  string // "" for valid
	}{
		{units.Limits{}, ""},
		{units.Limits{MemoryMax: new(uint64(1 << 30)), MemoryHigh: new(uint64(1 << 29)), MemorySwapMax: new(uint64(0)),
			TasksMax: new(uint64(1)), CPUQuota: new(time.Millisecond), CPUWeight: new(uint64(1)), IOWeight: new(uint64(10000)),
			RuntimeMax: new(time.Microsecond)}, ""},
		{units.Limits{MemoryHigh: new(uint64(1 << 30))}, ""}, // MemoryHigh alone is fine
		{units.Limits{MemoryMax: new(uint64(0))}, "MemoryMax"},
		{units.Limits{MemoryHigh: new(uint64(0))}, "MemoryHigh"},
		{units.Limits{MemoryMax: new(uint64(1 << 29)), MemoryHigh: new(uint64(1 << 30))}, "MemoryHigh"},
		{units.Limits{TasksMax: new(uint64(0))}, "TasksMax"},
		{units.Limits{CPUWeight: new(uint64(0))}, "CPUWeight"},
		{units.Limits{CPUWeight: new(uint64(10001))}, "CPUWeight"},
		{units.Limits{IOWeight: new(uint64(0))}, "IOWeight"},
		{units.Limits{IOWeight: new(uint64(20000))}, "IOWeight"},
		{units.Limits{CPUQuota: new(time.Duration(0))}, "CPUQuota"},
		{units.Limits{CPUQuota: new(-time.Second)}, "CPUQuota"},
		{units.Limits{RuntimeMax: new(-time.Second)}, "RuntimeMax"},
		{units.Limits{RuntimeMax: new(time.Duration(0))}, "RuntimeMax"},
	} {
		err := c.limits.Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("Validate(%v) = %v; want it valid", c.limits, err)
		case c.field != "" && (!errors.Is(err, units.ErrInvalidLimits) || !strings.Contains(err.Error(), c.field)):
			t.Errorf("Validate(%v) = %v; want ErrInvalidLimits naming %s", c.limits, err, c.field)
		}
	}
}

func TestLimitsValidateNamesEveryFieldAtFault(t *testing.T) {
	err := units.Limits{TasksMax: new(uint64(0)), CPUWeight: new(uint64(0))}.Validate()
	if err == nil || !strings.Contains(err.Error(), "TasksMax") || !strings.Contains(err.Error(), "CPUWeight") {
		t.Fatalf("Validate = %v; want both TasksMax and CPUWeight named", err)
	}
}
