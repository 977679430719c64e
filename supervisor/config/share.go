package config

import (
	"fmt"
	"strconv"
	"strings"
)

// A share is a bound given as an amount or as a percentage of what the
// machine has ("75%"), so that a default protects a small host and a
// large one alike. The daemon turns a percentage into an amount when it
// starts (Of); 0 is no bound.

// MemoryShare is a memory bound: a size ("6GiB", an integer of bytes),
// or "N%" of the machine's memory (1 to 1000: limits.max_memory bounds
// promises, which may pass the memory; the slices' bounds, checked by
// validate, cannot).
type MemoryShare struct {
	Bytes   Size
	Percent int
}

// TaskShare is a bound on processes and threads: a count, or "N%" of the
// most the kernel allows (the smaller of kernel.pid_max and
// kernel.threads-max, as systemd reads TasksMax's percentages), at most
// 100%.
type TaskShare struct {
	Count   int
	Percent int
}

// Of is the bound in bytes on a machine of total bytes; 0: none.
func (s MemoryShare) Of(total uint64) uint64 { return of(uint64(s.Bytes), s.Percent, total) }

// Of is the bound in tasks on a machine allowing total; 0: none.
func (s TaskShare) Of(total uint64) uint64 { return of(uint64(s.Count), s.Percent, total) }

// IsZero: no bound.
func (s MemoryShare) IsZero() bool { return s.Bytes == 0 && s.Percent == 0 }

// IsZero: no bound.
func (s TaskShare) IsZero() bool { return s.Count == 0 && s.Percent == 0 }

func of(amount uint64, percent int, total uint64) uint64 {
	if percent > 0 {
		return max(total/100*uint64(percent), 1)
	}
	return amount
}

func (s MemoryShare) String() string {
	if s.Percent > 0 {
		return strconv.Itoa(s.Percent) + "%"
	}
	return s.Bytes.String()
}

func (s TaskShare) String() string {
	if s.Percent > 0 {
		return strconv.Itoa(s.Percent) + "%"
	}
	return strconv.Itoa(s.Count)
}

// MarshalText writes s as UnmarshalTOML reads it.
func (s MemoryShare) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalText writes s as UnmarshalTOML reads it.
func (s TaskShare) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalTOML takes a size (an integer or a string) or "N%".
func (s *MemoryShare) UnmarshalTOML(v any) error {
	if p, ok, err := percent(v); ok || err != nil {
		*s = MemoryShare{Percent: p}
		return err
	}
	var b Size
	if err := b.UnmarshalTOML(v); err != nil {
		return fmt.Errorf("%w, or a percentage of the machine's memory like \"25%%\"", err)
	}
	*s = MemoryShare{Bytes: b}
	return nil
}

// UnmarshalTOML takes a count (an integer) or "N%".
func (s *TaskShare) UnmarshalTOML(v any) error {
	if p, ok, err := percent(v); ok || err != nil {
		if err == nil && p > 100 {
			err = fmt.Errorf("%q: a share of the tasks the kernel allows is at most 100%%: %w", v, ErrInvalid)
		}
		*s = TaskShare{Percent: p}
		return err
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > 1<<31 {
		return fmt.Errorf("want a count of tasks (0 or more) or a percentage like \"25%%\", not %v: %w", v, ErrInvalid)
	}
	*s = TaskShare{Count: int(n)}
	return nil
}

// maxPercent bounds a percentage: ten times the machine.
const maxPercent = 1000

// percent reads "N%", 1 <= N <= maxPercent; ok is false for anything without
// the sign.
func percent(v any) (int, bool, error) {
	text, isString := v.(string)
	num, found := strings.CutSuffix(strings.TrimSpace(text), "%")
	if !isString || !found {
		return 0, false, nil
	}
	p, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || p < 1 || p > maxPercent {
		return 0, true, fmt.Errorf("%q: want a percentage from 1%% to %d%%: %w", text, maxPercent, ErrInvalid)
	}
	return p, true, nil
}
