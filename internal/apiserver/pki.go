package apiserver

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// PKI names the files of $HOME/pki: the CA kubeconfig trusts, the serving
// certificate the API server presents on 127.0.0.1, and the key that signs
// service account tokens.
type PKI struct {
	Dir string
}

func (p PKI) CACert() string      { return filepath.Join(p.Dir, "ca.crt") }
func (p PKI) CAKey() string       { return filepath.Join(p.Dir, "ca.key") }
func (p PKI) ServingCert() string { return filepath.Join(p.Dir, "apiserver.crt") }
func (p PKI) ServingKey() string  { return filepath.Join(p.Dir, "apiserver.key") }
func (p PKI) WebCert() string     { return filepath.Join(p.Dir, "web.crt") }
func (p PKI) WebKey() string      { return filepath.Join(p.Dir, "web.key") }
func (p PKI) ServiceAccountKey() string {
	return filepath.Join(p.Dir, "service-account.key")
}

// servingValidity is how long a generated serving certificate lasts; it is
// made again at a start that finds it within renewBefore of its end.
const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 365 * 24 * time.Hour
	renewBefore     = 30 * 24 * time.Hour
)

// Ensure creates whatever is missing: a CA on first start, a serving
// certificate for the loopback names and listenHost (renewed when close to
// expiry or when the host changed), and the service account signing key.
// Existing material is kept, so a kubeconfig written earlier stays valid.
func (p PKI) Ensure(listenHost string) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("create pki directory: %w", err)
	}
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return fmt.Errorf("make pki directory private: %w", err)
	}
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return err
	}
	if err := p.ensureServing(caCert, caKey, listenHost); err != nil {
		return err
	}
	if _, err := os.Stat(p.ServiceAccountKey()); errors.Is(err, os.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generate service account key: %w", err)
		}
		pemBytes, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return fmt.Errorf("encode service account key: %w", err)
		}
		if err := keyutil.WriteKey(p.ServiceAccountKey(), pemBytes); err != nil {
			return fmt.Errorf("write service account key: %w", err)
		}
	}
	return nil
}

func (p PKI) ensureCA() (*x509.Certificate, crypto.Signer, error) {
	if certs, err := cert.CertsFromFile(p.CACert()); err == nil {
		key, err := keyutil.PrivateKeyFromFile(p.CAKey())
		if err != nil {
			return nil, nil, fmt.Errorf("read CA key %s (remove %s to make a new CA): %w", p.CAKey(), p.Dir, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, nil, fmt.Errorf("CA key %s is not a signing key", p.CAKey())
		}
		return certs[0], signer, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "invisible-dots-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, _ := x509.ParseCertificate(der)
	if err := writeCertAndKey(p.CACert(), p.CAKey(), der, key); err != nil {
		return nil, nil, err
	}
	return caCert, key, nil
}

func (p PKI) ensureServing(caCert *x509.Certificate, caKey crypto.Signer, listenHost string) error {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(listenHost); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	return ensureLeaf(caCert, caKey, p.ServingCert(), p.ServingKey(), "invisible-dots-apiserver", ips, []string{"localhost"})
}

// EnsureWebServing makes, when missing, stale or not covering them, the web
// client's serving certificate for these addresses and names, signed by the
// CA kubeconfig trusts: a person's browser trusts the page once they add
// that CA (pki/ca.crt), and a program checks it with the same file.
func (p PKI) EnsureWebServing(ips []net.IP, names []string) error {
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return err
	}
	return ensureLeaf(caCert, caKey, p.WebCert(), p.WebKey(), "invisible-dots-web", ips, names)
}

// ensureLeaf keeps the serving certificate at certPath when it is fresh,
// signed by caCert and covers ips and names; else it makes a new one.
func ensureLeaf(caCert *x509.Certificate, caKey crypto.Signer, certPath, keyPath, commonName string, ips []net.IP, names []string) error {
	if certs, err := cert.CertsFromFile(certPath); err == nil {
		c := certs[0]
		fresh := time.Until(c.NotAfter) > renewBefore && c.CheckSignatureFrom(caCert) == nil
		if fresh && coversIPs(c, ips) && coversNames(c, names) {
			if _, err := keyutil.PrivateKeyFromFile(keyPath); err == nil {
				return nil
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("generate serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(servingValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("create serving certificate %s: %w", certPath, err)
	}
	return writeCertAndKey(certPath, keyPath, der, key)
}

func coversNames(c *x509.Certificate, names []string) bool {
	for _, want := range names {
		if !slices.Contains(c.DNSNames, want) {
			return false
		}
	}
	return true
}

func coversIPs(c *x509.Certificate, ips []net.IP) bool {
	for _, want := range ips {
		found := false
		for _, have := range c.IPAddresses {
			if have.Equal(want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func writeCertAndKey(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil {
		return fmt.Errorf("write %s: %w", keyPath, err)
	}
	certPEM, err := cert.EncodeCertificates(&x509.Certificate{Raw: der})
	if err != nil {
		return fmt.Errorf("encode %s: %w", certPath, err)
	}
	if err := cert.WriteCert(certPath, certPEM); err != nil {
		return fmt.Errorf("write %s: %w", certPath, err)
	}
	return nil
}
