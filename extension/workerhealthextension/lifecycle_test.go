package workerhealthextension

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/workerwatch/workerwatch/internal/workerstate"
)

func TestShutdownWithoutStart(t *testing.T) {
	wh := newTestExt(t)
	require.NoError(t, wh.Shutdown(context.Background()))
	require.NoError(t, wh.Shutdown(context.Background()))
}

func TestStartShutdownStartAgain(t *testing.T) {
	wh := newTestExt(t)
	host := componenttest.NewNopHost()
	// State published before Start is served once it starts, and survives a
	// restart of the server (the processor does not republish for us).
	wh.Publish(snapshot(testSource, t0, worker("a", workerstate.Healthy)))

	for i := range 3 {
		require.NoError(t, wh.Start(context.Background(), host), "start #%d", i+1)
		base := "http://" + wh.boundAddr().String()
		code, _ := get(t, workerURL(base, "a"))
		assert.Equal(t, http.StatusOK, code)
		require.Error(t, wh.Start(context.Background(), host), "a second Start without Shutdown fails")
		require.NoError(t, wh.Shutdown(context.Background()))
		assert.Nil(t, wh.boundAddr())
		_, err := http.Get(base + "/livez")
		require.Error(t, err, "nothing listens after Shutdown")
	}
}

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	wh := newTestExt(t, func(c *Config) { c.NetAddr.Endpoint = ln.Addr().String() })
	err = wh.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `worker_health: cannot listen on endpoint "`+ln.Addr().String()+`"`)
	assert.Contains(t, err.Error(), "address already in use")
	require.NoError(t, wh.Shutdown(context.Background()))
}

func TestFactoryCreatesSubscriber(t *testing.T) {
	f := NewFactory()
	ext, err := f.Create(context.Background(), settingsForTest(), f.CreateDefaultConfig())
	require.NoError(t, err)
	// The processor finds the extension by this interface.
	_, ok := ext.(workerstate.Subscriber)
	assert.True(t, ok)
}
