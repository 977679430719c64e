package resources

import "testing"

func TestUnitResourceURIs(t *testing.T) {
	for _, tc := range []struct{ sandbox, path string }{
		{"abc123", "src/main.py"}, {"web-1", "/etc/hosts"}, {"x", "dir with space/a#b?.txt"}, {"x", "100%.txt"},
	} {
		uri := FileURI(tc.sandbox, tc.path)
		r, err := Parse(uri)
		if err != nil || r.Sandbox != tc.sandbox || r.Kind != "files" || r.Rest != tc.path {
			t.Errorf("%s: %+v %v; want sandbox %q, path %q", uri, r, err, tc.sandbox, tc.path)
		}
	}
	r, err := Parse("sandbox://web-1/logs/p42")
	if err != nil || r.Sandbox != "web-1" || r.Kind != "logs" || r.Rest != "p42" {
		t.Errorf("a log's URI: %+v %v", r, err)
	}
}

func TestUnitResourceContents(t *testing.T) {
	if c := Contents("u", "a.py", []byte("print(1)\n")); c.Text != "print(1)\n" || c.Blob != nil {
		t.Errorf("a text file: %+v", c)
	}
	elf := []byte("\x7fELF\x02\x01\x01\x00\x00\x00")
	if c := Contents("u", "prog", elf); c.Text != "" || string(c.Blob) != string(elf) || c.MIMEType == "" {
		t.Errorf("an ELF (valid UTF-8, with NULs): %+v; want a blob", c)
	}
	if c := Contents("u", "plot.png", []byte("\x89PNG\r\n\x1a\n\x00")); c.MIMEType != "image/png" || c.Blob == nil {
		t.Errorf("a PNG: %+v", c)
	}
}
