package config

import (
	"fmt"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// CPUQuota is a share of CPU time, in percent of one CPU, as systemd's
// CPUQuota= writes it: "50%" is half of one CPU, "200%" two whole CPUs. In
// a file it is a string of a whole number above 0 and "%", read and
// written by sandboxd1.CPUQuota, as sandboxctl's --cpu is.
type CPUQuota sandboxd1.CPUQuota

var errNotCPUQuota = sandboxd1.ErrNotCPUQuota

// Percent is the quota in percent of one CPU: 100 is one whole CPU.
func (q CPUQuota) Percent() int { return sandboxd1.CPUQuota(q).Percent() }

// PerSecUSec is the quota as systemd's CPUQuotaPerSecUSec property takes
// it: microseconds of CPU time per second of wall time.
func (q CPUQuota) PerSecUSec() uint64 { return sandboxd1.CPUQuota(q).PerSecUSec() }

// String writes q as a file does: "50%".
func (q CPUQuota) String() string { return sandboxd1.CPUQuota(q).String() }

// MarshalText writes q as String does, which UnmarshalText reads back.
func (q CPUQuota) MarshalText() ([]byte, error) { return sandboxd1.CPUQuota(q).MarshalText() }

// UnmarshalText reads "50%" or "200%"; 0% and fractions are refused.
func (q *CPUQuota) UnmarshalText(text []byte) error {
	return (*sandboxd1.CPUQuota)(q).UnmarshalText(text)
}

// UnmarshalTOML takes only strings: a bare number would leave it unclear
// whether 1 is one CPU or one percent of one.
func (q *CPUQuota) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		if n, isInt := v.(int64); isInt {
			return fmt.Errorf("the integer %d is not a CPU quota: %w", n, errNotCPUQuota)
		}
		return fmt.Errorf("%s is not a CPU quota: %w", tomlKind(v), errNotCPUQuota)
	}
	return q.UnmarshalText([]byte(s))
}
