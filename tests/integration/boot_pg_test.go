package integration

import (
	"os"
	"strings"
	"testing"
)

// What Debian's PostgreSQL needs of a booted sandbox, beyond its data:
// its clusters are made with ssl = on, on the machine's snakeoil pair,
// whose key is in /etc/ssl/private, a hidden path. The sandbox gets a
// pair of its own: the key readable by postgres (group ssl-cert, 0640 as
// make-ssl-cert leaves it), matching the certificate, and not the host's.
func TestABootedSandboxHasASnakeoilPairOfItsOwn(t *testing.T) {
	install(t)
	const cert, key = "/etc/ssl/certs/ssl-cert-snakeoil.pem", "/etc/ssl/private/ssl-cert-snakeoil.key"
	hostCert, err := os.ReadFile(cert)
	if err != nil {
		t.Fatalf("the host has no snakeoil certificate (ssl-cert, a dependency of postgresql, makes it): %v", err)
	}
	if _, err := os.Stat(key); err != nil {
		t.Fatalf("the host has no snakeoil key: %v", err)
	}
	id, _ := bootSandbox(t, "web")
	out := rootSh(t, id, `stat -c '%U:%G %a' `+key+`
		runuser -u postgres -- openssl pkey -in `+key+` -pubout | sha256sum
		openssl x509 -in `+cert+` -pubkey -noout | sha256sum`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "root:ssl-cert 640" {
		t.Fatalf("the sandbox's snakeoil key, as postgres reads it: %q; want root:ssl-cert 640 and its public key", out)
	}
	if lines[1] != lines[2] {
		t.Errorf("the sandbox's snakeoil key and certificate are not a pair: public keys %s and %s", lines[1], lines[2])
	}
	inside := rootSh(t, id, "cat "+cert)
	if inside == string(hostCert) {
		t.Error("the sandbox's snakeoil certificate is the host's: its key would be the host's secret")
	}
	// A second sandbox has a pair of its own too.
	other, _ := bootSandbox(t, "web")
	if rootSh(t, other, "cat "+cert) == inside {
		t.Error("two booted sandboxes have the same snakeoil pair")
	}
}
