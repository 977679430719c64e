package pidwatch

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func ended(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the process's end was not seen within 10s")
	}
	if !p.Ended() {
		t.Fatal("Done is closed but Ended says false")
	}
}

// A child killed with SIGKILL is seen ended and reaped: no zombie left,
// nothing left to wait for.
func TestUnitChildKilledIsSeenAndReaped(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	p, err := Watch(pid, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ended() {
		t.Fatal("Ended before the process ended")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ended(t, p)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != syscall.ECHILD {
		t.Errorf("wait4 of the ended child: %v; want ECHILD (reaped)", err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("kill(pid, 0) of the ended child: %v; want ESRCH", err)
	}
}

// A process that is not the watcher's child (one found again after a
// restart) is seen ended too; its parent reaps it.
func TestUnitOtherProcessEnded(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := Watch(cmd.Process.Pid, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	ended(t, p)
	_ = cmd.Wait() // the parent's: the watch did not take it
	if cmd.ProcessState == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the parent's wait: %v; want killed", cmd.ProcessState)
	}
}

// Stop ends a watch before the process ends: Done closes, Ended says no;
// a stopped child is still reaped when it ends.
func TestUnitStop(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	p, err := Watch(pid, true)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	if p.Ended() {
		t.Error("Ended says true after Stop, the process alive")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped child was not reaped within 10s of its end")
		}
	}
}

// A process already gone cannot be watched: the caller knows it ended.
func TestUnitGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Watch(cmd.Process.Pid, false); err == nil {
		t.Error("Watch of a reaped process succeeded")
	}
}
