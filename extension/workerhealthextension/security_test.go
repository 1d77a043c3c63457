package workerhealthextension

// The health API's exposure: where it binds by default, the limits that keep
// a slow or hostile client from holding it, and bearer-token auth through the
// real bearertokenauth extension (any collector auth extension works the
// same way, through confighttp's auth setting).

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/bearertokenauthextension"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configauth"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The defaults, as the server actually runs with them.
func TestServerDefaultsApplied(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	host, _, err := net.SplitHostPort(cfg.NetAddr.Endpoint)
	require.NoError(t, err)
	assert.Equal(t, "localhost", host, "binds to loopback unless told otherwise")

	// localhost resolves to a loopback address, never a wildcard.
	wh := newTestExt(t, func(c *Config) { c.NetAddr.Endpoint = "localhost:0" })
	startTestExt(t, wh)
	addr := wh.boundAddr().(*net.TCPAddr)
	assert.True(t, addr.IP.IsLoopback(), "bound to %s", addr)

	wh.mu.Lock()
	srv := wh.server
	wh.mu.Unlock()
	assert.Equal(t, 10*time.Second, srv.ReadHeaderTimeout)
	assert.Equal(t, time.Minute, srv.IdleTimeout)
	assert.Equal(t, 30*time.Second, srv.WriteTimeout)
	assert.Equal(t, int64(64<<10), cfg.MaxRequestBodySize)
}

// A client that never finishes its headers is dropped after
// read_header_timeout (slowloris). (No endpoint reads a body: every one is
// GET/HEAD and anything else is a 405, TestMethodsAndUnknownPaths.)
func TestSlowClients(t *testing.T) {
	wh := newTestExt(t, func(c *Config) {
		c.ReadHeaderTimeout = 200 * time.Millisecond
	})
	base := startTestExt(t, wh)

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: "))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	start := time.Now()
	_, err = bufio.NewReader(conn).ReadString('\n')
	// The server closes the connection (EOF or reset), well before our deadline.
	require.Error(t, err)
	assert.Less(t, time.Since(start), 4*time.Second)
}

// authHost is a host with the given extensions (componenttest's nop host has none).
type authHost struct {
	component.Host
	exts map[component.ID]component.Component
}

func (h authHost) GetExtensions() map[component.ID]component.Component { return h.exts }

func TestBearerTokenAuth(t *testing.T) {
	authID := component.MustNewID("bearertokenauth")
	af := bearertokenauthextension.NewFactory()
	acfg := af.CreateDefaultConfig().(*bearertokenauthextension.Config)
	acfg.BearerToken = configopaque.String("s3cret-token")
	auth, err := af.Create(context.Background(), extensiontest.NewNopSettings(af.Type()), acfg)
	require.NoError(t, err)
	host := authHost{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{authID: auth}}
	require.NoError(t, auth.Start(context.Background(), host))
	t.Cleanup(func() { require.NoError(t, auth.Shutdown(context.Background())) })

	wh := newTestExt(t, func(c *Config) {
		c.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: authID}})
	})
	publish(wh, snapshot(testSource, t0, worker("worker-1", contract.Healthy)))
	require.NoError(t, wh.Start(context.Background(), host))
	t.Cleanup(func() { require.NoError(t, wh.Shutdown(context.Background())) })
	base := "http://" + wh.boundAddr().String()

	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"wrong scheme", "Basic s3cret-token", http.StatusUnauthorized},
		{"right token", "Bearer s3cret-token", http.StatusOK},
		// RFC 9110 11.1: the scheme is case-insensitive, and 1*SP
		// separates it from the token.
		{"lower-case scheme", "bearer s3cret-token", http.StatusOK},
		{"upper-case scheme, two spaces", "BEARER  s3cret-token", http.StatusOK},
		{"lower-case scheme, wrong token", "bearer nope", http.StatusUnauthorized},
		{"token in another case", "Bearer S3CRET-TOKEN", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/health/workers/worker-1", "/health/workers", "/", "/livez"} {
				req, err := http.NewRequest(http.MethodGet, base+path, nil)
				require.NoError(t, err)
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				var body errorBody
				decodeErr := json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				assert.Equal(t, tc.want, resp.StatusCode, path)
				assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"), path)
				if tc.want == http.StatusUnauthorized {
					// RFC 9110 11.6.1: a 401 carries a challenge.
					assert.Equal(t, `Bearer realm="workerwatch"`, resp.Header.Get("WWW-Authenticate"), path)
					assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), path)
					require.NoError(t, decodeErr, "%s: the 401 is the API's JSON error", path)
					assert.Contains(t, body.Error, "unauthorized")
				}
			}
		})
	}

	// An auth extension that is not there fails Start, naming it.
	wh2 := newTestExt(t, func(c *Config) {
		c.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: component.MustNewIDWithName("bearertokenauth", "missing")}})
	})
	err = wh2.Start(context.Background(), host)
	require.ErrorContains(t, err, "bearertokenauth/missing")
	require.NoError(t, wh2.Shutdown(context.Background()))
}
