package bullmqreceiver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/redistest"
)

// TestReceiverTLS: a real redis-server speaking only TLS (a CA and a server
// certificate made here); the receiver reads it with `tls.insecure: false`
// and the CA file, and refuses it without the CA (a recoverable status).
func TestReceiverTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	port := freeport.Port(t)
	redistest.Exec(t, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool.AppendCertsFromPEM(caPEM)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}})
	defer c.Close()
	eventually(t, 20*time.Second, "redis-server with TLS answers", func() error { return c.Ping(ctx).Err() })
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "1")
	b.activate(ctx, t, "1", "w1")

	cfg := testConfig(addr, "jobs")
	cfg.TLS.Insecure = false
	cfg.TLS.CAFile = caFile
	cfg.TLS.ServerName = "localhost"
	h := startReceiver(t, cfg, nil)
	eventually(t, 10*time.Second, "job 1 read over TLS", func() error {
		if got, _ := lastSnapshot(records(h.logs), "jobs", "w1"); !slices.Equal(got, []string{"1"}) {
			return fmt.Errorf("w1: %v (status %v)", got, h.host.last())
		}
		return nil
	})

	// Without the CA: the server's certificate is refused, said in the status.
	bad := testConfig(addr, "jobs")
	bad.TLS.Insecure = false
	bad.TLS.ServerName = "localhost"
	hb := startReceiver(t, bad, nil)
	eventually(t, 10*time.Second, "an unknown CA refused", func() error {
		ev := hb.host.last()
		if ev == nil || ev.Err() == nil {
			return fmt.Errorf("status %v", ev)
		}
		return nil
	})
	require.Zero(t, hb.logs.LogRecordCount())
}

// writeCerts writes a CA and a server certificate for localhost/127.0.0.1.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}
