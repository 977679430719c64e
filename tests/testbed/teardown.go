package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// clearStale removes what a dead testbed left under base, or reports
// ErrBusy if one is alive there or in DefaultDir: a testbed of `testbed
// up` holds no lock once its command has exited, and two testbeds must
// not run at once, whatever their directories.
func clearStale(base string) error {
	for _, dir := range []string{base, DefaultDir} {
		info, err := readInfo(InfoPath(dir))
		if err == nil && info.alive() {
			return fmt.Errorf("%w: systemd pid %d, started by `testbed up`; end it with `go run ./tests/testbed/cmd/testbed down`", ErrBusy, info.PID)
		}
	}
	return removeInstance(instanceDir(base))
}

// removeInstance removes an instance directory once nothing uses it: loop
// devices backed by its images are detached (autoclear frees them when the
// namespace dies, but asynchronously), and host mounts below it (there
// should be none: all of the testbed's mounts live in its namespace) are
// lazily unmounted.
func removeInstance(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	images, _ := filepath.Glob(filepath.Join(dir, "shared", "*.img"))
	for _, img := range images {
		err := waitFor(context.Background(), "loop devices on "+img+" to be freed", 10*time.Second, func() (bool, error) {
			devs, err := loopDevicesOf(img)
			return err == nil && len(devs) == 0, err
		})
		if err != nil {
			devs, _ := loopDevicesOf(img)
			for _, dev := range devs {
				if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("detaching %s from %s: %w: %s", dev, img, err, strings.TrimSpace(string(out))))
				}
			}
		}
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("removing the testbed directory: %w", err))
	}
	return errors.Join(errs...)
}

// loopDevicesOf lists the loop devices whose backing file is img.
func loopDevicesOf(img string) ([]string, error) {
	out, err := exec.Command("losetup", "-n", "-O", "NAME", "-j", img).Output()
	if err != nil {
		return nil, fmt.Errorf("listing loop devices of %s: %w", img, err)
	}
	return strings.Fields(string(out)), nil
}

// mountsUnder lists the host's mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			found = append(found, mp)
		}
	}
	for i, j := 0, len(found)-1; i < j; i, j = i+1, j-1 {
		found[i], found[j] = found[j], found[i]
	}
	return found, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
