package kubelet

import (
	"fmt"
	"strings"
)

// ImagePrefix is the scheme of a container's image on a sandboxd node:
// sandboxd.io/project/<name> makes a sandbox of project <name>. A tag
// ":latest" is allowed (and means nothing); any other tag or a digest is
// refused, since a project has no versions to pick from.
const ImagePrefix = "sandboxd.io/project/"

// ParseImage returns the project an image names.
func ParseImage(image string) (string, error) {
	rest, ok := strings.CutPrefix(image, ImagePrefix)
	if !ok {
		return "", fmt.Errorf("image %q: %w", image, ErrImage)
	}
	rest = strings.TrimSuffix(rest, ":latest")
	if !validProject(rest) {
		return "", fmt.Errorf("image %q: project name %q: letters, digits, \"-\", \"_\" and \".\", not starting with \".\" or \"-\": %w", image, rest, ErrImage)
	}
	return rest, nil
}

// validProject is a project name as sandboxd takes one (the daemon says
// the last word).
func validProject(name string) bool {
	if name == "" || len(name) > 100 || name[0] == '.' || name[0] == '-' {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
