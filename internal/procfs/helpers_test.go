//go:build linux

package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHelpersOnARealChild(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	assert.Contains(t, Children(os.Getpid()), pid)
	assert.Contains(t, Pids(), pid)
	assert.Equal(t, []string{"sleep", "3600"}, Cmdline(pid))
	assert.True(t, Alive(pid))
	rss, err := RSS(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, rss)
	st, err := StatOf(pid)
	require.NoError(t, err)
	assert.Equal(t, "sleep", st.CommString())
	assert.Equal(t, int32(os.Getpid()), st.PPID)
	// A child keeps its parent's process group and session.
	self, err := StatOf(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, []int32{self.Pgrp, self.Session}, []int32{st.Pgrp, st.Session})
	assert.Positive(t, st.Pgrp)

	// Killed but not reaped: a zombie, not alive.
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return !Alive(pid) }, 10*time.Second, 5*time.Millisecond)
	_ = cmd.Wait()
	assert.Nil(t, Cmdline(pid))
	_, err = RSS(pid)
	require.ErrorIs(t, err, ErrVanished)
}

// cpu.max of a cgroup and its ancestors: the tightest quota wins; "max" and
// missing files are no quota.
func TestCgroupCPUMax(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, rel), 0o755))
		if content != "" {
			require.NoError(t, os.WriteFile(filepath.Join(root, rel, "cpu.max"), []byte(content), 0o644))
		}
	}
	write("kubepods/pod1", "50000 100000\n")
	write("kubepods/pod1/ctr", "200000 100000\n")
	write("kubepods/pod2", "max 100000\n")
	write("kubepods/pod2/ctr", "")
	write("kubepods/pod3/ctr", "150000 100000\n")
	r := NewReader("/proc")
	for _, tc := range []struct {
		rel           string
		quota, period int64
		ok            bool
	}{
		{"/kubepods/pod1/ctr", 50000, 100000, true},
		{"kubepods/pod1/ctr", 50000, 100000, true},
		{"/kubepods/pod2/ctr", 0, 0, false},
		{"/kubepods/pod3/ctr", 150000, 100000, true},
		{"/", 0, 0, false},
		{"", 0, 0, false},
		{"/missing/x", 0, 0, false},
	} {
		q, p, ok := r.CgroupCPUMax(root, tc.rel)
		assert.Equal(t, []any{tc.quota, tc.period, tc.ok}, []any{q, p, ok}, tc.rel)
	}
}

// The affinity read by system call and from status agree.
func TestCPUsAllowed(t *testing.T) {
	r := NewReader("/proc")
	require.True(t, r.ownPidNS, "/proc is this process's pid namespace")
	byStatus := NewReader("/proc")
	byStatus.ownPidNS = false
	for _, pid := range []int32{int32(os.Getpid()), 1} {
		a, err := r.CPUsAllowed(pid)
		require.NoError(t, err)
		b, err := byStatus.CPUsAllowed(pid)
		require.NoError(t, err)
		assert.Positive(t, a)
		assert.Equal(t, b, a, "pid %d", pid)
	}
	fixture := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(fixture, "7"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fixture, "7", "status"), []byte("Name:\tx\nCpus_allowed_list:\t0-3,8\n"), 0o644))
	n, err := NewReader(fixture).CPUsAllowed(7)
	require.NoError(t, err)
	assert.Equal(t, 5, n, "a fixture tree is read from status")
}
