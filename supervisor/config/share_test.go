package config

import (
	"errors"
	"strings"
	"testing"
)

// The bounds of all sandboxes and of each user's are shares of the
// machine by default, sizes or counts when set so, and none when 0.
func TestSharesOfTheMachine(t *testing.T) {
	c, err := Parse([]byte("[limits]\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	if got := c.Limits.SliceMemoryMax.Of(24 * gib); got != 24*gib/100*75 {
		t.Errorf("the default slice_memory_max of 24GiB is %d; want 75%%", got)
	}
	if got := c.Limits.UserTasksMax.Of(32768); got != 32768/100*25 {
		t.Errorf("the default user_tasks_max of 32768 tasks is %d; want 25%%", got)
	}
	c, err = Parse([]byte("[limits]\nuser_memory_max = \"6GiB\"\nuser_tasks_max = 500\nslice_memory_max = 0\nslice_tasks_max = \"50%\"\nmax_memory = \"300%\"\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	if l.UserMemoryMax.Of(24*gib) != 6*gib || l.UserTasksMax.Of(32768) != 500 || !l.SliceMemoryMax.IsZero() ||
		l.SliceTasksMax.Of(1000) != 500 || l.MaxMemory.Of(gib) != 3*gib/100*100 {
		t.Errorf("read as %+v", l)
	}
	for _, bad := range []struct{ text, want string }{
		{`user_memory_max = "150%"`, "more than the machine's memory"},
		{`slice_tasks_max = "101%"`, "at most 100%"},
		{`user_tasks_max = "0%"`, "from 1% to 1000%"},
		{`user_tasks_max = "4GiB"`, "want a count of tasks"},
		{`user_tasks_max = -1`, "want a count of tasks"},
		{`user_memory_max = "1KiB"`, "too small"},
		{`max_memory = "lots"`, "percentage of the machine's memory"},
	} {
		_, err := Parse([]byte("[limits]\n"+bad.text+"\n"), "t")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v; want it refused with %q", bad.text, err, bad.want)
		}
	}
}
