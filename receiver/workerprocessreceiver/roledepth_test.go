//go:build linux

package workerprocessreceiver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A role by position (depth: 1) takes the root's direct children whatever
// their command line, and nothing deeper: Celery's ForkPoolWorkers keep
// the main process's command line.
func TestRoleByDepth(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	startRealTree(t, "depth1")
	cfg := realConfig()
	cfg.Workers[0].Roles = []RoleConfig{{Name: "pool", Depth: 1}}
	require.NoError(t, cfg.Validate())
	s := newTestScraper(t, cfg)
	md, err := s.scrape(context.Background())
	require.NoError(t, err)
	count := func(role string) float64 {
		c, _ := findValue(md, "depth1", "workerwatch.process.count", map[string]string{"workerwatch.process.role": role})
		return c
	}
	assert.Equal(t, 1.0, count("main"))
	assert.Equal(t, 3.0, count("pool"), "the root's three children")
	assert.Equal(t, 3.0, count("child"), "the grandchildren keep the default role")

	// Depth and a command line together: both must match.
	cfg = realConfig()
	cfg.Workers[0].Roles = []RoleConfig{{Name: "pool", Depth: 1, Cmdline: "wprtest-grand"}}
	s = newTestScraper(t, cfg)
	md, err = s.scrape(context.Background())
	require.NoError(t, err)
	c, _ := findValue(md, "depth1", "workerwatch.process.count", map[string]string{"workerwatch.process.role": "pool"})
	assert.Equal(t, 0.0, c)
}

func TestRoleDepthValidate(t *testing.T) {
	for _, tc := range []struct {
		role RoleConfig
		want string
	}{
		{RoleConfig{Name: "pool", Depth: 1}, ""},
		{RoleConfig{Name: "pool", Depth: 2}, "workers[0].roles[0].depth: must be 0 (any) or 1"},
		{RoleConfig{Name: "pool", Depth: -1}, "workers[0].roles[0].depth"},
		{RoleConfig{Name: "pool"}, "workers[0].roles[0]: cmdline, executable or depth is required"},
	} {
		cfg := realConfig()
		cfg.Workers[0].Roles = []RoleConfig{tc.role}
		err := cfg.Validate()
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
}
