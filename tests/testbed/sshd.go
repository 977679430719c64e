package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SSHD is an sshd a test started inside the testbed, listening on the
// testbed's own loopback (its network namespace is private), accepting the
// test's key for root.
type SSHD struct {
	Host string // 127.0.0.1
	Port int
	User string // root
	// IdentityFile is the client's private key, KnownHostsFile holds the
	// server's host key for [Host]:Port.
	IdentityFile, KnownHostsFile string
	// Options are the ssh arguments to reach it: -i, -o IdentitiesOnly=yes,
	// -o UserKnownHostsFile=..., -o StrictHostKeyChecking=yes.
	Options []string
	// Log is the file sshd logs to (its -e output), for failure messages.
	Log string
	PID int
}

// Target is the ssh:// stage target for path on this server.
func (s SSHD) Target(path string) string {
	return fmt.Sprintf("ssh://%s@%s:%d%s", s.User, s.Host, s.Port, path)
}

// StartSSHD starts an sshd for the test, inside the testbed: host and
// client keys made with ssh-keygen in a temporary directory, a config of
// its own (127.0.0.1 on a free port, root by key only, no PAM), run as a
// child of the test with -D -e. It returns once the server sends its
// banner; the test's cleanup kills that process (by its pid) and waits for
// it. The machine's own sshd is never touched.
func StartSSHD(t testing.TB) SSHD {
	t.Helper()
	Require(t)
	const sshdPath = "/usr/sbin/sshd"
	for _, tool := range []string{sshdPath, "ssh-keygen", "ssh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("StartSSHD: %s not found: install openssh-server and openssh-client (tests/install-deps.sh)", tool)
		}
	}
	// The privilege separation directory, in the testbed's private /run.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("StartSSHD: %v", err)
	}
	if err := loopbackUp(); err != nil {
		t.Fatalf("StartSSHD: %v", err)
	}
	dir := t.TempDir()
	hostKey := filepath.Join(dir, "host_ed25519")
	clientKey := filepath.Join(dir, "id_ed25519")
	for _, k := range []struct{ path, comment string }{{hostKey, "sandboxd-testbed-host"}, {clientKey, "sandboxd-testbed-client"}} {
		MustRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", k.comment, "-f", k.path)
	}
	clientPub, err := os.ReadFile(clientKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("StartSSHD: %v", err)
	}
	s := SSHD{
		Host:           "127.0.0.1",
		Port:           port,
		User:           "root",
		IdentityFile:   clientKey,
		KnownHostsFile: filepath.Join(dir, "known_hosts"),
		Log:            filepath.Join(dir, "sshd.log"),
	}
	authorized := filepath.Join(dir, "authorized_keys")
	config := filepath.Join(dir, "sshd_config")
	files := map[string]string{
		authorized:       string(clientPub),
		s.KnownHostsFile: fmt.Sprintf("[%s]:%d %s", s.Host, s.Port, hostPub),
		config: strings.Join([]string{
			"ListenAddress " + s.Host,
			"Port " + strconv.Itoa(s.Port),
			"HostKey " + hostKey,
			"PidFile " + filepath.Join(dir, "sshd.pid"),
			"AuthorizedKeysFile " + authorized,
			"PermitRootLogin prohibit-password",
			"PubkeyAuthentication yes",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"UsePAM no",
			"StrictModes no",
			"X11Forwarding no",
			"AllowTcpForwarding no",
			"PrintMotd no",
			"LogLevel VERBOSE",
			"",
		}, "\n"),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Options = []string{
		"-i", clientKey,
		"-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + s.KnownHostsFile,
		"-o", "StrictHostKeyChecking=yes",
	}

	log, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", config)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("StartSSHD: starting %s: %v", sshdPath, err)
	}
	s.PID = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Exactly the process started above: the pid is ours until
		// Wait reaps it, so it cannot name anyone else.
		select {
		case <-exited:
			return
		default:
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("StartSSHD: killing sshd (pid %d): %v", s.PID, err)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("StartSSHD: sshd (pid %d) did not exit within 10s of SIGKILL", s.PID)
		}
	})

	addr := net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
	err = waitFor(context.Background(), "sshd to accept on "+addr, 10*time.Second, func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return false, fmt.Errorf("sshd exited: %v", err)
		default:
		}
		return banner(addr)
	})
	if err != nil {
		t.Fatalf("StartSSHD: %v; sshd's log:\n%s", err, tail(s.Log, 20))
	}
	return s
}

// banner says whether the server at addr sends an SSH banner.
func banner(addr string) (bool, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return false, err
	}
	if !strings.HasPrefix(line, "SSH-") {
		return false, fmt.Errorf("%s answered %q, not an SSH banner", addr, line)
	}
	return true, nil
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// loopbackUp brings lo up in the testbed's network namespace (systemd
// normally has at boot). It refuses outside the testbed, where lo is the
// machine's.
func loopbackUp() error {
	if !Inside() {
		return errors.New("not inside the testbed: lo is the machine's own")
	}
	flags, err := os.ReadFile("/sys/class/net/lo/flags")
	if err == nil {
		if v, perr := strconv.ParseUint(strings.TrimSpace(string(flags)), 0, 64); perr == nil && v&syscall.IFF_UP != 0 {
			return nil
		}
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing lo up in the testbed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SecondBtrfs makes a btrfs filesystem of the test's own, apart from the
// testbed's: a sparse image in a temporary directory, mkfs.btrfs, mounted
// with -o loop at a new directory, whose path it returns. The test's
// cleanup (which runs on failure too) unmounts it and detaches its loop
// device. Inside the testbed only: its /tmp is private, and the mount (with
// the loop device, which -o loop sets to clear itself) goes with the
// testbed's namespace even if the test binary is killed.
func SecondBtrfs(t testing.TB) string {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "btrfs.img")
	mnt := filepath.Join(dir, "mnt")
	if err := sparseFile(img, 512<<20); err != nil {
		t.Fatalf("SecondBtrfs: %v", err)
	}
	MustRun(t, "mkfs.btrfs", "-q", img)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before mounting, so that a mount that half worked is
	// undone too; after t.TempDir's, so it runs before the directory goes.
	t.Cleanup(func() {
		if mounted(mnt) {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("SecondBtrfs: unmounting %s: %v: %s (unmounting lazily)", mnt, err, strings.TrimSpace(string(out)))
				_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
			}
		}
		// -o loop set autoclear, so unmounting frees the loop device, but
		// not always at once: wait a little, then detach it ourselves.
		err := waitFor(context.Background(), "the loop device of "+img+" to be freed", 5*time.Second, func() (bool, error) {
			devs, err := loopDevicesOf(img)
			return err == nil && len(devs) == 0, err
		})
		if err != nil {
			devs, _ := loopDevicesOf(img)
			for _, dev := range devs {
				if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
					t.Errorf("SecondBtrfs: detaching %s (%s): %v: %s", dev, img, err, strings.TrimSpace(string(out)))
				}
			}
		}
	})
	MustRun(t, "mount", "-o", "loop", img, mnt)
	return mnt
}

// mounted says whether something is mounted at dir, in this namespace.
func mounted(dir string) bool {
	mounts, err := mountsUnder(dir)
	return err == nil && slices.Contains(mounts, dir)
}
