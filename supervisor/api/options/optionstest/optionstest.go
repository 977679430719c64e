package optionstest

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
)

// CheckCreate checks options.Create on in, and on each option alone:
// it never panics; it accepts a set of options exactly when it accepts
// each alone, and then sets exactly the fields those options name, to
// their values (durations exact, in µs); a refusal is valid UTF-8 and
// says each option's own refusal, which names the option.
func CheckCreate(t testing.TB, in map[string]dbus.Variant) {
	t.Helper()
	got, err := options.Create(in)
	var singles []string // each option's own refusal
	want := supervisor.CreateOptions{}
	for _, name := range slices.Sorted(maps.Keys(in)) {
		v := in[name]
		one, oneErr := options.Create(map[string]dbus.Variant{name: v})
		if oneErr != nil {
			msg := oneErr.Error()
			says := "option " + name + " "
			if !slices.Contains(options.CreateNames(), name) {
				says = "unknown option " + strconv.Quote(name)
			}
			if !strings.HasPrefix(msg, says) {
				t.Fatalf("option %s = %v: the refusal %q does not start with %q", name, v, msg, says)
			}
			if setWant(&supervisor.CreateOptions{}, name, v) {
				t.Fatalf("option %s = %v (%s) refused, but it is of the option's type and within its bounds: %q", name, v, v.Signature(), msg)
			}
			singles = append(singles, msg)
			continue
		}
		if !setWant(&want, name, v) {
			t.Fatalf("option %s = %v (%s) accepted: it is not a known option of that type", name, v, v.Signature())
		}
		single := supervisor.CreateOptions{}
		setWant(&single, name, v)
		if !reflect.DeepEqual(one, single) {
			t.Fatalf("option %s = %v alone gives %+v; want %+v", name, v, one, single)
		}
	}
	if err != nil {
		msg := err.Error()
		if len(singles) == 0 {
			t.Fatalf("options.Create(%v) = %q, but each option alone is accepted", in, msg)
		}
		if !utf8.ValidString(msg) {
			t.Fatalf("options.Create(%v): the refusal %q is not valid UTF-8 (a D-Bus error could not carry it)", in, msg)
		}
		if want := strings.Join(singles, "; "); msg != want {
			t.Fatalf("options.Create(%v) = %q; want each option's own refusal: %q", in, msg, want)
		}
		return
	}
	if len(singles) > 0 {
		t.Fatalf("options.Create(%v) accepted options that alone are refused: %q", in, singles)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("options.Create(%v) = %+v; want %+v", in, got, want)
	}
	if got.TTL < 0 || got.Limits.CPUQuota != nil && *got.Limits.CPUQuota < 0 || got.Limits.RuntimeMax != nil && *got.Limits.RuntimeMax < 0 {
		t.Fatalf("options.Create(%v): a negative duration: %+v", in, got)
	}
	if got.Name != "" && supervisor.ValidateSandboxName(got.Name) != nil {
		t.Fatalf("options.Create(%v): accepted the name %q", in, got.Name)
	}
}

// setWant sets the field option name documents to v, if v is of the
// option's type and within its bounds; false when it is not.
func setWant(o *supervisor.CreateOptions, name string, v dbus.Variant) bool {
	u, isU := v.Value().(uint64)
	s, isS := v.Value().(string)
	dur := func(d **time.Duration) bool {
		if !isU || u > uint64(math.MaxInt64/int64(time.Microsecond)) {
			return false
		}
		x := time.Duration(u) * time.Microsecond
		*d = &x
		return true
	}
	count := func(p **uint64) bool {
		*p = &u
		return isU
	}
	switch name {
	case "MemoryMax":
		// Below the floor a sandbox's init cannot start.
		return count(&o.Limits.MemoryMax) && u >= uint64(sandboxd1.MinMemoryMax)
	case "MemoryHigh":
		return count(&o.Limits.MemoryHigh)
	case "MemorySwapMax":
		return count(&o.Limits.MemorySwapMax)
	case "TasksMax":
		return count(&o.Limits.TasksMax)
	case "CPUWeight":
		return count(&o.Limits.CPUWeight)
	case "IOWeight":
		return count(&o.Limits.IOWeight)
	case "CPUQuotaPerSecUSec":
		return dur(&o.Limits.CPUQuota)
	case "RuntimeMaxUSec":
		return dur(&o.Limits.RuntimeMax)
	case "DiskQuota":
		o.DiskQuota = u
		return isU && u > 0
	case "TTLUSec":
		var d *time.Duration
		if !dur(&d) || *d == 0 {
			return false
		}
		o.TTL = *d
		return true
	case "Name":
		o.Name = s
		return isS && supervisor.ValidateSandboxName(s) == nil
	case "Profile":
		o.Profile = s
		return isS
	case "Network":
		o.Network = s
		return isS
	case "Allow":
		list, ok := v.Value().([]string)
		o.Allow = list
		return ok
	case "ReadOnlyProject":
		b, ok := v.Value().(bool)
		o.ReadOnlyProject = &b
		return ok
	case "Boot":
		b, ok := v.Value().(bool)
		o.Boot = b
		return ok
	}
	return false
}
