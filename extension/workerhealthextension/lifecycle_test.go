package workerhealthextension

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configauth"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/internal/contract"
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
	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy)))

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
	_, ok := ext.(contract.Subscriber)
	assert.True(t, ok)
}

// A Serve that fails after Start is reported as a permanent error through
// component status (the collector keeps running; /readyz and operators see it).
func TestServeFailureReported(t *testing.T) {
	wh := newTestExt(t)
	listen := wh.listen
	wh.listen = func(ctx context.Context) (net.Listener, error) {
		ln, err := listen(ctx)
		if err != nil {
			return nil, err
		}
		return failingListener{ln}, nil
	}
	host := &statusHost{Host: componenttest.NewNopHost(), events: make(chan *componentstatus.Event, 1)}
	require.NoError(t, wh.Start(context.Background(), host))
	select {
	case ev := <-host.events:
		assert.Equal(t, componentstatus.StatusPermanentError, ev.Status())
		require.ErrorContains(t, ev.Err(), "listener broke")
	case <-time.After(5 * time.Second):
		t.Fatal("no status reported")
	}
	require.NoError(t, wh.Shutdown(context.Background()))
}

type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) { return nil, errors.New("listener broke") }

type statusHost struct {
	component.Host
	events chan *componentstatus.Event
}

func (h *statusHost) Report(ev *componentstatus.Event) { h.events <- ev }

// The auth and storage extensions this one uses start before it and stop
// after it (the collector orders extensions by Dependencies).
func TestDependencies(t *testing.T) {
	assert.Empty(t, newTestExt(t).Dependencies())
	auth, histStorage := component.MustNewID("bearertokenauth"), component.MustNewIDWithName("file_storage", "history")
	wh := newTestExt(t, func(c *Config) {
		c.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: auth}})
		c.History.StorageID = &histStorage
	})
	assert.Equal(t, []component.ID{auth, histStorage}, wh.Dependencies())
}

func TestPublishNilIgnored(t *testing.T) {
	wh := newTestExt(t)
	wh.Publish(nil)
	assert.Empty(t, wh.store.Load().ByIDOrder)
}

// countingStorage is a storage extension whose clients count their Close.
type countingStorage struct {
	component.StartFunc
	component.ShutdownFunc
	opened, closed atomic.Int32
}

type countingClient struct {
	storage.Client
	closed *atomic.Int32
}

func (c countingClient) Close(ctx context.Context) error {
	c.closed.Add(1)
	return c.Client.Close(ctx)
}

func (s *countingStorage) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	s.opened.Add(1)
	return countingClient{Client: storage.NewNopClient(), closed: &s.closed}, nil
}

// A Start that fails after the history's storage client is open (here the
// cluster's peer client names an authenticator the collector does not have)
// closes that client: the collector does not Shutdown a component whose
// Start failed halfway, so nothing else would.
func TestStartFailureClosesHistoryStorage(t *testing.T) {
	fs := &countingStorage{}
	host := authHost{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{storageID: fs}}
	wh := newTestExt(t, func(c *Config) {
		id := storageID
		c.History.StorageID = &id
		c.Cluster.Self = "shard-a:4317"
		c.Cluster.Static = configoptional.Some(cluster.StaticMembers{Members: []cluster.StaticMember{{Endpoint: "shard-a:4317", API: "127.0.0.1:1"}}})
		c.Cluster.Client.Auth = configoptional.Some(configauth.Config{AuthenticatorID: component.MustNewID("missingauth")})
	})
	err := wh.Start(context.Background(), host)
	require.ErrorContains(t, err, "cluster.client")
	assert.Equal(t, int32(1), fs.opened.Load())
	assert.Equal(t, int32(1), fs.closed.Load(), "the history's storage client is closed when Start fails")
	require.NoError(t, wh.Shutdown(context.Background()))
}
