package sandboxd1

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CPUQuota is a share of CPU time, in percent of one CPU, as systemd's
// CPUQuota= writes it: "50%" is half of one CPU, "200%" two whole CPUs.
// As text it is a whole number above 0 and "%"; on the bus it is the
// option CPUQuotaPerSecUSec (PerSecUSec).
type CPUQuota int

// ErrNotCPUQuota is wrapped by every error of reading a CPU quota; its
// text says what one is.
var ErrNotCPUQuota = errors.New(`want a whole percentage of one CPU, more than 0, like "50%" or "200%"`)

// ParseCPUQuota reads "50%" or "200%".
func ParseCPUQuota(text string) (CPUQuota, error) {
	var q CPUQuota
	err := q.UnmarshalText([]byte(text))
	return q, err
}

// Percent is the quota in percent of one CPU: 100 is one whole CPU.
func (q CPUQuota) Percent() int { return int(q) }

// PerSecUSec is the quota as systemd's CPUQuotaPerSecUSec property (and
// CreateSandbox's option of that name) takes it: microseconds of CPU time
// per second of wall time.
func (q CPUQuota) PerSecUSec() uint64 { return uint64(q) * 10_000 }

// String writes q as text: "50%".
func (q CPUQuota) String() string { return strconv.Itoa(int(q)) + "%" }

// MarshalText writes q as String does, which UnmarshalText reads back.
func (q CPUQuota) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// UnmarshalText reads "50%" or "200%"; 0% and fractions are refused.
func (q *CPUQuota) UnmarshalText(text []byte) error {
	s := string(text)
	num, ok := strings.CutSuffix(s, "%")
	if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return fmt.Errorf("%q is not a CPU quota: %w", s, ErrNotCPUQuota)
	}
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return fmt.Errorf("%q is too large: %w", s, ErrNotCPUQuota)
	}
	if n == 0 {
		return fmt.Errorf("%q is no CPU at all: %w", s, ErrNotCPUQuota)
	}
	*q = CPUQuota(n)
	return nil
}
