package verb

import "testing"

func TestSizesAndAgesReadWell(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 256 << 20: "256.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := BytesText(in); got != want {
			t.Errorf("BytesText(%d) = %q; want %q", in, got, want)
		}
	}
}
