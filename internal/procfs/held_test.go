//go:build linux

package procfs

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeldStatOfReapedProcess: a held stat file of a process that was reaped
// fails, is closed, and the pid is read by path again (where it is gone, or
// could be another process now).
func TestHeldStatOfReapedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	pid := int32(cmd.Process.Pid)
	files := NewHeldFiles(NewReader("/proc"), 100)
	h := &Held{}
	var st Stat
	require.NoError(t, files.Stat(h, pid, &st))
	files.HoldStat(h, pid)
	require.True(t, h.HoldsStat())
	require.Equal(t, 1, files.Open())
	var again Stat
	require.NoError(t, files.Stat(h, pid, &again))
	assert.Equal(t, st.Starttime, again.Starttime)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait() // reaped: the pid is free
	require.ErrorIs(t, files.Stat(h, pid, &again), ErrVanished)
	assert.False(t, h.HoldsStat())
	assert.Equal(t, 0, files.Open())
}

func TestSyncKids(t *testing.T) {
	p := &HeldFiles{max: 100}
	f := &Held{}
	// Slots without files (open failed or the bound was reached) just follow the threads.
	p.syncKids(f, []int32{10, 12, 15})
	assert.Equal(t, []heldKid{{tid: 10}, {tid: 12}, {tid: 15}}, f.kids)
	f.kids[1].f = 7 // pretend 12 holds a file: it must be kept in place
	p.syncKids(f, []int32{9, 12, 20})
	assert.Equal(t, []heldKid{{tid: 9}, {tid: 12, f: 7}, {tid: 20}}, f.kids)
	p.syncKids(f, []int32{12})
	assert.Equal(t, []heldKid{{tid: 12, f: 7}}, f.kids)
}

// A fixture tree (a plain directory) holds no file.
func TestHeldFilesFixtureHoldsNone(t *testing.T) {
	r := NewReader(t.TempDir())
	assert.False(t, r.IsProcfs())
	assert.Zero(t, NewHeldFiles(r, 100).max)
	assert.True(t, NewReader("/proc").IsProcfs())
}
