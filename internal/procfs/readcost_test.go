//go:build linux

package procfs

// What one process read costs, per file and per way of reading it: the
// figures behind doc.go (why not prometheus/procfs) and held.go (why files
// are held open).
//
//	go test -run '^$' -bench BenchmarkReadProcess -benchmem ./internal/procfs/
//	WORKERWATCH_KMEM=1 go test -run TestHeldFileKernelMemory -v ./internal/procfs/
//
// Each op reads one process (the host's processes in turn), so ns/op and
// allocs/op are per process.

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	promprocfs "github.com/prometheus/procfs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// readablePids returns up to n live processes of the host whose stat,
// children and fd directory this user can open.
func readablePids(t testing.TB, n int) []int32 {
	t.Helper()
	r := NewReader("/proc")
	pids, err := r.Pids(nil)
	require.NoError(t, err)
	var out []int32
	for _, p := range pids {
		var st Stat
		if r.ReadStat(p, &st) != nil || st.KernelThread() {
			continue
		}
		if _, err := r.Children(p, p, nil); err != nil {
			continue
		}
		if _, err := r.FDCount(p); err != nil {
			continue
		}
		if out = append(out, p); len(out) == n {
			break
		}
	}
	require.NotEmpty(t, out)
	return out
}

// holdAll opens the file named by rest for each pid, with flags (skipping
// processes that exited since they were listed); the files are closed when
// the benchmark ends.
func holdAll(b *testing.B, pids []int32, flags int, rest func(int32) string) []int {
	fds := make([]int, 0, len(pids))
	for _, p := range pids {
		fd, err := unix.Open(rest(p), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		fds = append(fds, fd)
	}
	require.NotEmpty(b, fds)
	b.Cleanup(func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	})
	return fds
}

func BenchmarkReadProcess(b *testing.B) {
	pids := readablePids(b, 500)
	r := NewReader("/proc")
	statPath := func(p int32) string { return "/proc/" + strconv.Itoa(int(p)) + "/stat" }
	childrenPath := func(p int32) string {
		return "/proc/" + strconv.Itoa(int(p)) + "/task/" + strconv.Itoa(int(p)) + "/children"
	}
	fdPath := func(p int32) string { return "/proc/" + strconv.Itoa(int(p)) + "/fd" }
	var st Stat

	b.Run("stat/prometheus-procfs", func(b *testing.B) {
		fs, err := promprocfs.NewFS("/proc")
		require.NoError(b, err)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if p, err := fs.Proc(int(pids[i%len(pids)])); err == nil {
				_, _ = p.Stat()
			}
		}
	})
	b.Run("stat/open-read", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = r.ReadStat(pids[i%len(pids)], &st)
		}
	})
	b.Run("stat/held", func(b *testing.B) {
		fds := holdAll(b, pids, unix.O_RDONLY, statPath)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if buf, err := r.readAll(fds[i%len(fds)], true); err == nil {
				ParseStat(buf, &st)
			}
		}
	})
	b.Run("children/open-read", func(b *testing.B) {
		out := make([]int32, 0, 64)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p := pids[i%len(pids)]
			out, _ = r.Children(p, p, out[:0])
		}
	})
	b.Run("children/held", func(b *testing.B) {
		fds := holdAll(b, pids, unix.O_RDONLY, childrenPath)
		out := make([]int32, 0, 64)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if buf, err := r.readAll(fds[i%len(fds)], true); err == nil {
				out = ParsePidList(buf, out[:0])
			}
		}
	})
	// Per worker (not per process) at every walk: the root's affinity and
	// the cpu.max of its cgroup and their ancestors (here three levels of
	// files in a temporary directory, as on a Kubernetes node).
	b.Run("affinity/sched_getaffinity", func(b *testing.B) {
		require.True(b, r.ownPidNS)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = r.CPUsAllowed(pids[i%len(pids)])
		}
	})
	b.Run("affinity/status", func(b *testing.B) {
		byStatus := NewReader("/proc")
		byStatus.ownPidNS = false // as for a proc_root of another pid namespace
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = byStatus.CPUsAllowed(pids[i%len(pids)])
		}
	})
	b.Run("cpu.max/three-levels", func(b *testing.B) {
		root := b.TempDir()
		dir := root
		for _, level := range []string{"kubepods", "pod1", "ctr"} {
			dir = filepath.Join(dir, level)
			require.NoError(b, os.MkdirAll(dir, 0o755))
			require.NoError(b, os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("100000 100000\n"), 0o644))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _, _ = r.CgroupCPUMax(root, "/kubepods/pod1/ctr")
		}
	})
	b.Run("fdcount/fstatat", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = r.FDCount(pids[i%len(pids)])
		}
	})
	b.Run("fdcount/held-fstat", func(b *testing.B) {
		fds := holdAll(b, pids, unix.O_PATH|unix.O_DIRECTORY, fdPath)
		var s unix.Stat_t
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = unix.Fstat(fds[i%len(fds)], &s)
		}
	})
}

// TestHeldFileKernelMemory measures the kernel memory a held, once-read
// stat file keeps (its seq_file buffer): the figure the README gives for
// max_open_files. Opt-in: it reads a host-wide counter (SUnreclaim of
// /proc/meminfo), which anything else running moves too.
func TestHeldFileKernelMemory(t *testing.T) {
	if os.Getenv("WORKERWATCH_KMEM") == "" {
		t.Skip("a measurement: WORKERWATCH_KMEM=1")
	}
	sunreclaim := func() int64 {
		b, err := os.ReadFile("/proc/meminfo")
		require.NoError(t, err)
		v, ok := FieldKB(b, "SUnreclaim:")
		require.True(t, ok)
		return v
	}
	pids := readablePids(t, 1000)
	// About 2,000 files (a process's stat opened several times is several
	// files), for a figure well above the noise.
	perPid := (2000 + len(pids) - 1) / len(pids)
	r := NewReader("/proc")
	pool := &HeldFiles{r: r, max: perPid * len(pids)}
	files := make([]heldFD, 0, perPid*len(pids))
	defer func() {
		for i := range files {
			pool.close(&files[i])
		}
	}()
	before := sunreclaim()
	for k := 0; k < perPid; k++ {
		for _, p := range pids {
			r.pidPath(p, "stat")
			f := pool.hold(0)
			require.NotZero(t, f)
			_, err := r.readAll(f.fd(), true) // the buffer is allocated by the first read
			require.NoError(t, err)
			files = append(files, f)
		}
	}
	after := sunreclaim()
	perFile := float64(after-before) / float64(len(files))
	t.Logf("RESULT %d held stat files: SUnreclaim +%d KiB, %.0f B per file", len(files), (after-before)>>10, perFile)
	require.Greater(t, perFile, 0.0, "held files keep kernel memory")
}
