package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CPUQuota is a share of CPU time, in percent of one CPU, as systemd's
// CPUQuota= writes it: "50%" is half of one CPU, "200%" two whole CPUs. In
// a file it is a string of a whole number above 0 and "%".
type CPUQuota int

const cpuQuotaForm = `want a whole percentage of one CPU, more than 0, like "50%" or "200%"`

var errNotCPUQuota = errors.New(cpuQuotaForm)

// Percent is the quota in percent of one CPU: 100 is one whole CPU.
func (q CPUQuota) Percent() int { return int(q) }

// PerSecUSec is the quota as systemd's CPUQuotaPerSecUSec property takes
// it: microseconds of CPU time per second of wall time.
func (q CPUQuota) PerSecUSec() uint64 { return uint64(q) * 10_000 }

// String writes q as a file does: "50%".
func (q CPUQuota) String() string { return strconv.Itoa(int(q)) + "%" }

// MarshalText writes q as String does, which UnmarshalText reads back.
func (q CPUQuota) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// UnmarshalText reads "50%" or "200%"; 0% and fractions are refused.
func (q *CPUQuota) UnmarshalText(text []byte) error {
	s := string(text)
	num, ok := strings.CutSuffix(s, "%")
	if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return fmt.Errorf("%q is not a CPU quota: %w", s, errNotCPUQuota)
	}
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return fmt.Errorf("%q is too large: %w", s, errNotCPUQuota)
	}
	if n == 0 {
		return fmt.Errorf("%q is no CPU at all: %w", s, errNotCPUQuota)
	}
	*q = CPUQuota(n)
	return nil
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
