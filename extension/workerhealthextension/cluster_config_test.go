package workerhealthextension

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/cluster"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
)

func TestClusterConfig(t *testing.T) {
	def := createDefaultConfig().(*Config).Cluster
	assert.False(t, def.Enabled(), "off by default")
	assert.Equal(t, 2*time.Second, def.Client.Timeout)
	assert.Equal(t, 5*time.Second, def.SyncInterval)
	assert.Equal(t, 30*time.Second, def.Settle)
	assert.Equal(t, time.Second, def.ListCache)
	assert.Equal(t, "http", def.Scheme)

	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "cluster.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		check   func(t *testing.T, c *cluster.Config)
		wantErr []string
	}{
		{name: "static", check: func(t *testing.T, c *cluster.Config) {
			require.True(t, c.Static.HasValue())
			assert.False(t, c.DNS.HasValue())
			assert.Equal(t, []cluster.StaticMember{{Endpoint: "gw-1:4317", API: "gw-1:8090"}, {Endpoint: "gw-2:4317", API: "gw-2:8090"}}, c.Static.Get().Members)
		}},
		{name: "dns", check: func(t *testing.T, c *cluster.Config) {
			require.True(t, c.DNS.HasValue())
			d := c.DNS.Get()
			assert.Equal(t, "workerwatch-gateway.observability.svc.cluster.local", d.Hostname)
			assert.Equal(t, "4317", d.Port)
			assert.Equal(t, "8090", d.APIPort, "default api_port")
			assert.Equal(t, time.Second, d.Timeout, "default dns.timeout")
			assert.Equal(t, time.Second, c.Client.Timeout)
			assert.Equal(t, 2*time.Second, c.SyncInterval)
			assert.Equal(t, 10*time.Second, c.Settle)
		}},
		{name: "no_self", wantErr: []string{"cluster.self: required when cluster.static or cluster.dns is set"}},
		{name: "no_members", wantErr: []string{"cluster.static: one of cluster.static or cluster.dns is required with cluster.self"}},
		{name: "both", wantErr: []string{"cluster.static: cluster.static and cluster.dns are exclusive"}},
		{name: "self_not_member", wantErr: []string{`cluster.self: "gw-9:4317" is not one of cluster.static.members' endpoints`}},
		{name: "bad_api", wantErr: []string{`cluster.static.members[0].api: must be host:port, got "gw-1"`}},
		{name: "twice", wantErr: []string{`cluster.static.members[1].endpoint: "gw-1:4317" is listed twice`}},
		{name: "bad_dns", wantErr: []string{
			"cluster.dns.hostname: must not be empty",
			`cluster.dns.api_port: must be a port number (1-65535), got "0"`,
			`cluster.dns.port: must be a port number (1-65535), got "x"`,
			"cluster.dns.timeout: must be positive, got 0s",
		}},
		{name: "bad_misc", wantErr: []string{
			`cluster.scheme: must be "http" or "https", got "ftp"`,
			"cluster.client.endpoint: is not used",
			"cluster.client.timeout: must be positive, got 0s",
			"cluster.sync_interval: must be positive, got 0s",
			"cluster.settle: must not be negative, got -1s",
			"cluster.list_cache: must not be negative, got -1s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			sub, err := cm.Sub(component.NewIDWithName(metadata.Type, tc.name).String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			if len(tc.wantErr) > 0 {
				for _, want := range tc.wantErr {
					require.ErrorContains(t, err, want)
				}
				return
			}
			require.NoError(t, err)
			tc.check(t, &cfg.(*Config).Cluster)
		})
	}
}
