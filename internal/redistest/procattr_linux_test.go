//go:build linux

package redistest

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExecDiesWithParent: the server is started with a parent-death
// signal, so a test binary that dies without its cleanups leaves none.
func TestExecDiesWithParent(t *testing.T) {
	s := Start(t)
	require.NotNil(t, s.cmd.SysProcAttr)
	require.Equal(t, syscall.SIGKILL, s.cmd.SysProcAttr.Pdeathsig)
}
