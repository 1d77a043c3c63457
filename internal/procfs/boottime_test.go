//go:build linux

package procfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBootTime(t *testing.T) {
	dir := t.TempDir()
	r := NewReader(dir)
	_, err := r.BootTime()
	require.Error(t, err, "no stat file")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o600))
	bt, err := r.BootTime()
	require.NoError(t, err)
	assert.Equal(t, time.Unix(1700000000, 0).UTC(), bt)
	assert.Equal(t, time.Unix(1700000012, 340e6).UTC(), StartTime(bt, 1234))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("btime x\n"), 0o600))
	_, err = r.BootTime()
	require.ErrorContains(t, err, "bad btime")

	// The host's own.
	bt, err = NewReader("/proc").BootTime()
	require.NoError(t, err)
	assert.True(t, bt.Before(time.Now()))
}
