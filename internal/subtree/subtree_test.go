package subtree

import "testing"

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"/a", "/a", true}, {"/a/b", "/a", true}, {"/a/b", "/a/", true},
		{"/ab", "/a", false}, {"/a", "/a/b", false}, {"/x", "/", true},
	} {
		if got := Within(c.path, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v; want %v", c.path, c.dir, got, c.want)
		}
	}
}
