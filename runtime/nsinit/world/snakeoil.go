package world

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Debian's services (PostgreSQL's clusters, made with ssl = on; a postfix,
// an nginx told so) use the machine's "snakeoil" pair: a self-signed
// certificate anyone reads and its key in /etc/ssl/private, which a
// sandbox does not see (a hidden path). A booted sandbox's PostgreSQL
// then refused to start ("could not load private key file"). The sandbox
// gets a pair of its own instead, made afresh at each start: the host's
// key stays hidden, and the service starts on its configuration as it is.
const (
	snakeoilCert = "/etc/ssl/certs/ssl-cert-snakeoil.pem"
	snakeoilKey  = "/etc/ssl/private/ssl-cert-snakeoil.key"
	sslPrivate   = "/etc/ssl/private"
)

// ownSnakeoil puts a fresh snakeoil pair in the sandbox (r, before the
// pivot) where the host has one and its private directory is hidden: the
// key (root:ssl-cert, 0640, as make-ssl-cert leaves it) in the hidden,
// empty directory, the certificate over the host's in the sandbox's
// layer. Elsewhere it does nothing.
func ownSnakeoil(r *root, hidden []string, hostname string) error {
	if !slices.Contains(hidden, sslPrivate) {
		return nil
	}
	if _, ok, err := r.stat(snakeoilCert); err != nil || !ok {
		return err
	}
	// Written by the init, whose powers are above the sandbox's root:
	// only where the sandbox's own names lead nowhere else (a layer from
	// an earlier life may have made /etc/ssl/certs a symlink to /dev or
	// /proc).
	for _, dir := range []string{"/etc/ssl/certs", sslPrivate} {
		if got, err := r.resolve(dir); err != nil || got != dir {
			return fmt.Errorf("the sandbox's own snakeoil pair: %s leads to %q (%v), not to itself", dir, got, err)
		}
	}
	gid, err := groupID(r, "ssl-cert")
	if err != nil {
		return fmt.Errorf("the sandbox's own snakeoil key: %w", err)
	}
	cert, key, err := selfSigned(hostname)
	if err != nil {
		return fmt.Errorf("making the sandbox's own snakeoil pair: %w", err)
	}
	if err := replaceFile(r, snakeoilKey, key, 0o640, 0, gid); err != nil {
		return err
	}
	return replaceFile(r, snakeoilCert, cert, 0o644, 0, 0)
}

// selfSigned is a P-256 key (fast to make: every booted start makes one)
// and a certificate of it for name, both PEM.
func selfSigned(name string) (cert, key []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// groupID is group name's id in the sandbox's /etc/group.
func groupID(r *root, name string) (int, error) {
	var gid = -1
	err := r.at("/etc/group", func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 3 && fields[0] == name {
				gid, err = strconv.Atoi(fields[2])
				return err
			}
		}
		return sc.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("reading /etc/group: %w", err)
	}
	if gid < 0 {
		return 0, fmt.Errorf("no group %s in /etc/group", name)
	}
	return gid, nil
}

// replaceFile writes data to p inside the root, whole: a new file beside
// it (never through a name the sandbox's layer may hold from an earlier
// life), its owners and mode set on the descriptor, then renamed over p.
func replaceFile(r *root, p string, data []byte, mode uint32, uid, gid int) error {
	dir, base := p[:strings.LastIndex(p, "/")], p[strings.LastIndex(p, "/")+1:]
	err := r.at(dir, func(d string) error {
		tmp := d + "/." + base + ".sandboxd"
		if err := unix.Unlink(tmp); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), tmp)
		_, err = f.Write(data)
		if err == nil {
			err = f.Chown(uid, gid)
		}
		if err == nil {
			err = f.Chmod(os.FileMode(mode))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = unix.Rename(tmp, d+"/"+base)
		}
		if err != nil {
			_ = unix.Unlink(tmp)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("writing %s in the sandbox: %w", p, err)
	}
	return nil
}
