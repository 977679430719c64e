package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/kubelet"
)

// issuer is a CA that signs client certificates.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newIssuer(t *testing.T, name string) issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return issuer{cert, key}
}

// client is a client certificate of user cn, signed by i.
func (i issuer) client(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.cert, &key.PublicKey, i.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestKubeletAPIRefusesWhomTheClusterDoesNot serves the kubelet API as
// run does (webhookAuth, clientCA, virtual-kubelet's routes) against a
// fake apiserver that vouches for no token and allows one user: no
// caller but that user's certificate reaches a route.
func TestKubeletAPIRefusesWhomTheClusterDoesNot(t *testing.T) {
	ca, other := newIssuer(t, "cluster-ca"), newIssuer(t, "another-ca")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The apiserver: no token is vouched for; one user is allowed.
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: false}
			_ = json.NewEncoder(w).Encode(tr)
		case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
			var sar authorizationv1.SubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&sar)
			sar.Status.Allowed = sar.Spec.User == "kube-apiserver"
			_ = json.NewEncoder(w).Encode(sar)
		default:
			http.NotFound(w, r)
		}
	}))
	defer apiserver.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: apiserver.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := flags{nodeName: "host-1", clientCAFile: caFile}
	auth, err := webhookAuth(kube, f)
	if err != nil {
		t.Fatal(err)
	}
	p := kubelet.New(kubelet.Config{NodeName: f.nodeName, Connect: func(context.Context) (*client.Client, error) {
		return nil, context.Canceled
	}})
	mux := http.NewServeMux()
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		RunInContainer: p.RunInContainer, AttachToContainer: p.AttachToContainer, GetContainerLogs: p.GetContainerLogs,
		GetPods: p.GetPods, GetPodsFromKubernetes: p.GetPods, GetStatsSummary: p.GetStatsSummary, GetMetricsResource: p.GetMetricsResource, PortForward: p.PortForward,
	}, true))
	srv := httptest.NewUnstartedServer(nodeutil.WithAuth(auth, mux))
	srv.TLS = &tls.Config{}
	if err := clientCA(caFile)(srv.TLS); err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	defer srv.Close()

	as := func(cert *tls.Certificate, token string) func(method, path string) (int, error) {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: tr}
		return func(method, path string) (int, error) {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
	}
	wrongCA, stranger, allowed := other.client(t, "kube-apiserver"), ca.client(t, "mallory"), ca.client(t, "kube-apiserver")
	routes := [][2]string{
		{"POST", "/exec/agents/claim-1/agent?command=id&output=1"},
		{"POST", "/run/agents/claim-1/agent?cmd=id"},
		{"POST", "/attach/agents/claim-1/agent?output=1"},
		{"POST", "/portForward/agents/claim-1"},
		{"GET", "/containerLogs/agents/claim-1/agent"},
		{"GET", "/stats/summary"},
		{"GET", "/pods"},
		{"GET", "/metrics/resource"},
	}
	for _, r := range routes {
		for who, tc := range map[string]struct {
			do   func(method, path string) (int, error)
			want int
		}{
			"anonymous":          {as(nil, ""), http.StatusUnauthorized},
			"a token":            {as(nil, "a-token-no-one-vouches-for"), http.StatusUnauthorized},
			"another CA's cert":  {as(&wrongCA, ""), 0},
			"a user not allowed": {as(&stranger, ""), http.StatusForbidden},
		} {
			code, err := tc.do(r[0], r[1])
			switch {
			case tc.want == 0 && err == nil && code != http.StatusUnauthorized:
				t.Errorf("%s %s as %s: %d; want the handshake refused or 401", r[0], r[1], who, code)
			case tc.want != 0 && code != tc.want:
				t.Errorf("%s %s as %s: %d, %v; want %d", r[0], r[1], who, code, err, tc.want)
			}
		}
	}
	// The apiserver's certificate gets through to the routes.
	if code, err := as(&allowed, "")("GET", "/pods"); err != nil || code != http.StatusOK {
		t.Errorf("GET /pods as the apiserver: %d, %v; want 200", code, err)
	}
	if code, _ := as(&allowed, "")("GET", "/containerLogs/agents/claim-1/agent"); code == http.StatusUnauthorized || code == http.StatusForbidden {
		t.Errorf("GET /containerLogs as the apiserver: %d; want past authentication", code)
	}
}
