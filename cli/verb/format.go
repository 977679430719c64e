package verb

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// FromMicros is a time the daemon sends in microseconds since the epoch.
func FromMicros(us uint64) time.Time { return time.UnixMicro(int64(us)) }

// Age is how long ago t was, to the unit that matters: 45s, 12m, 3h, 2d.
func Age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// DurationText is a duration as a person writes it: 24h, 10m, 1h30m.
func DurationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// UserName is uid's name, or the number.
func UserName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

// BytesText is a size for people: 512 B, 3.2 MiB, 1.0 GiB.
func BytesText(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// QuotedPaths lists paths a sandbox or a project named, each quoted as
// git quotes names, so that none can act on the terminal or fake a line.
func QuotedPaths(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = termsafe.Path(p)
	}
	return strings.Join(q, ", ")
}

// SandboxLabel is what a message calls sandbox e: its name, or its id.
func SandboxLabel(e sandboxd1.ListEntry) string {
	if e.Name != "" {
		return e.Name
	}
	return e.ID
}

// LeftOutLine says how many changed paths the ignore rules left out.
func LeftOutLine(n int) string {
	paths := "paths"
	if n == 1 {
		paths = "path"
	}
	return fmt.Sprintf("%d %s left out by ignore rules (.sandboxignore)", n, paths)
}
