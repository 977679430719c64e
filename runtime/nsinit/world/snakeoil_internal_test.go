package world

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// A booted sandbox's snakeoil pair is a pair (the key is the
// certificate's), for its name, and new each time.
func TestSelfSignedIsAFreshPair(t *testing.T) {
	begin := time.Now()
	cert, key, err := selfSigned("sandbox-x")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a P-256 pair made in %v", time.Since(begin))
	cb, _ := pem.Decode(cert)
	kb, _ := pem.Decode(key)
	if cb == nil || kb == nil || cb.Type != "CERTIFICATE" || kb.Type != "PRIVATE KEY" {
		t.Fatalf("not PEM of a certificate and a private key:\n%s\n%s", cert, key)
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := k.(*ecdsa.PrivateKey)
	if !ok || !priv.PublicKey.Equal(c.PublicKey) {
		t.Error("the key is not the certificate's")
	}
	if c.Subject.CommonName != "sandbox-x" || c.VerifyHostname("sandbox-x") != nil {
		t.Errorf("the certificate is for %q, %v; want sandbox-x", c.Subject.CommonName, c.DNSNames)
	}
	again, _, _ := selfSigned("sandbox-x")
	if bytes.Equal(again, cert) {
		t.Error("two pairs made are the same")
	}
}
