package sandboxd1

import (
	"errors"
	"strings"
	"testing"
)

func TestSizeUnmarshalText(t *testing.T) {
	good := map[string]Size{
		"0":                    0,
		"1":                    1,
		"1536":                 1536,
		"1K":                   KiB,
		"1KiB":                 KiB,
		"512M":                 512 * MiB,
		"20G":                  20 * GiB,
		"20GiB":                20 * GiB,
		"20 GiB":               20 * GiB,
		"3T":                   3 * TiB,
		"18446744073709551615": 1<<64 - 1,
		"16777215T":            16777215 * TiB,
	}
	for in, want := range good {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err != nil || s != want {
			t.Errorf("%q: got %d, %v; want %d", in, s, err, want)
		}
	}
	bad := map[string]string{
		"":                     `"" is not a size`,
		"G":                    `"G" is not a size`,
		"-1G":                  `"-1G" is not a size`,
		"+1G":                  `"+1G" is not a size`,
		"1.5G":                 `unknown unit ".5G"`,
		"12 parsecs":           `unknown unit "parsecs"`,
		"20GB":                 `unknown unit "GB"`,
		"20g":                  `unknown unit "g"`,
		" 20G":                 `" 20G" is not a size`,
		"16777216T":            `"16777216T" is too large`,
		"18446744073709551616": `is too large`,
	}
	for in, want := range bad {
		var s Size
		err := s.UnmarshalText([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v; want an error saying %q", in, err, want)
		}
		if err != nil && !errors.Is(err, ErrNotSize) {
			t.Errorf("%q: %v does not say what a size is", in, err)
		}
	}
}

func TestSizeString(t *testing.T) {
	tests := map[Size]string{
		0:              "0",
		1000:           "1000",
		KiB:            "1KiB",
		1536 * KiB:     "1536KiB",
		20 * GiB:       "20GiB",
		1024 * GiB:     "1TiB",
		5*TiB + 1:      "5497558138881",
		16777215 * TiB: "16777215TiB",
	}
	for s, want := range tests {
		if got := s.String(); got != want {
			t.Errorf("Size(%d).String() = %q; want %q", uint64(s), got, want)
		}
		text, _ := s.MarshalText()
		var back Size
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("Size(%d) marshals to %q, which reads back as %d, %v", uint64(s), text, back, err)
		}
	}
}

func TestParseSizeIsUnmarshalText(t *testing.T) {
	if s, err := ParseSize("512M"); err != nil || s != 512*MiB {
		t.Errorf("ParseSize(512M) = %d, %v; want %d", s, err, 512*MiB)
	}
	if _, err := ParseSize("12 parsecs"); !errors.Is(err, ErrNotSize) {
		t.Errorf("ParseSize(12 parsecs) = %v; want ErrNotSize", err)
	}
}

func TestCPUQuotaText(t *testing.T) {
	for _, s := range []string{"1%", "50%", "100%", "200%", "1600%"} {
		var q CPUQuota
		if err := q.UnmarshalText([]byte(s)); err != nil {
			t.Errorf("UnmarshalText(%q): %v", s, err)
			continue
		}
		if q.String() != s {
			t.Errorf("UnmarshalText(%q) then String() = %q", s, q.String())
		}
	}
	for _, s := range []string{"", "%", "50", "0%", "00%", "abc%", "5 0%", " 50%", "50 %", "50%%", "+50%", "1.5%"} {
		var q CPUQuota
		if err := q.UnmarshalText([]byte(s)); !errors.Is(err, ErrNotCPUQuota) {
			t.Errorf("UnmarshalText(%q) = %v; want ErrNotCPUQuota", s, err)
		}
	}
}

func TestCPUQuotaPerSecUSec(t *testing.T) {
	q, err := ParseCPUQuota("250%")
	if err != nil || q.Percent() != 250 || q.PerSecUSec() != 2_500_000 {
		t.Errorf("ParseCPUQuota(250%%) = %d (%d µs/s), %v; want 250%%, 2500000 µs/s", q, q.PerSecUSec(), err)
	}
}
