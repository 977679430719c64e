package toolcall

import "testing"

func TestUnitImageTypes(t *testing.T) {
	for _, tc := range []struct {
		data, want string
	}{
		{"\x89PNG\r\n\x1a\n\x00\x00", "image/png"},
		{"\xff\xd8\xff\xe0rest", "image/jpeg"},
		{"GIF89a...", "image/gif"},
		{"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"<svg xmlns=", ""},
		{"\x7fELF\x02\x01", ""},
		{"", ""},
	} {
		if got := ImageType([]byte(tc.data)); got != tc.want {
			t.Errorf("ImageType(%q) = %q; want %q", tc.data, got, tc.want)
		}
	}
}
