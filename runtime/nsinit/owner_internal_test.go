package nsinit

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// Owner threads launching at once all start their child: a thread's
// change of uid makes the whole process undumpable for a moment, and a
// child of another owner thread exec'ing /proc/self/exe then was refused
// (EACCES; make bench's 8 clients met it once in 1,000 creates).
func TestOwnerLaunchesAtOnceAllStart(t *testing.T) {
	const workers, each = 8, 40
	const base = 0x7f000000 // host ids no account has
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				uid := uint32(base + w*each + i)
				cmd := exec.Command("/proc/self/exe", "-test.run=^$")
				cmd.SysProcAttr = &syscall.SysProcAttr{
					Cloneflags:  syscall.CLONE_NEWUSER,
					UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}},
					GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}},
					Credential:  &syscall.Credential{Uid: 0, Gid: 0},
				}
				if err := startOwnedBy(cmd, uid, uid); err != nil {
					errs <- fmt.Errorf("launch %d of worker %d: %w", i, w, err)
					continue
				}
				if err := cmd.Wait(); err != nil {
					errs <- fmt.Errorf("launch %d of worker %d: the child: %w", i, w, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d launches at once failed", n, workers*each)
	}
}
