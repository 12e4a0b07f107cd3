package cli

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"
)

// TestServingCertificate: without files the metrics port gets a fresh
// self-signed certificate naming the host; with --tls-cert-file and
// --tls-private-key-file, the files' certificate; with one of the two, an
// error that says they go together.
func TestServingCertificate(t *testing.T) {
	self, err := (&SecureServing{}).Certificate("node-a")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(self.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("node-a"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}

	dir := t.TempDir()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("metrics.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	fromFiles, err := (&SecureServing{CertFile: certFile, KeyFile: keyFile}).Certificate("node-a")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := cert.ParseCertsPEM(certPEM)
	if !bytes.Equal(fromFiles.Certificate[0], want[0].Raw) {
		t.Error("--tls-cert-file's certificate is not the one served")
	}
	if _, err := (&SecureServing{CertFile: certFile}).Certificate("node-a"); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("--tls-cert-file alone: %v, want an error", err)
	}
}
