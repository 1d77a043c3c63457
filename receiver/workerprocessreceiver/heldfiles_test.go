//go:build linux

package workerprocessreceiver

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openFDs counts this process's open files.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es) - 1 // the directory being listed
}

// TestHeldFiles: the files kept open between scrapes are counted exactly,
// closed when their process leaves, bounded by max_open_files, and give the
// same readings as opening the files every scrape.
func TestHeldFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	tr := startRealTree(t, "held")
	ctx := context.Background()
	base := openFDs(t)

	s := newTestScraper(t, realConfig())
	cfgNone := realConfig()
	cfgNone.MaxOpenFiles = 0
	none := newTestScraper(t, cfgNone)
	cfgFew := realConfig()
	cfgFew.MaxOpenFiles = 5
	few := newTestScraper(t, cfgFew)

	scrapeAll := func() (held, unheld, bounded map[string][]float64) {
		read := func(sc *workerScraper) map[string][]float64 {
			md, err := sc.scrape(ctx)
			require.NoError(t, err)
			out := map[string][]float64{}
			for _, role := range []string{"main", "engine-child", "child"} {
				attrs := map[string]string{"workerwatch.process.role": role}
				c, _ := findValue(md, "held", "workerwatch.process.count", attrs)
				f, _ := findValue(md, "held", "process.unix.file_descriptor.count", attrs)
				r, _ := findValue(md, "held", "process.memory.usage", attrs)
				out[role] = []float64{c, f, r}
			}
			return out
		}
		return read(s), read(none), read(few)
	}
	same := func(a, b map[string][]float64) {
		t.Helper()
		for role, v := range a {
			assert.Equal(t, v[0], b[role][0], "%s process count", role)
			assert.Equal(t, v[1], b[role][1], "%s open files", role)
			assert.InEpsilon(t, v[2], b[role][2], 0.02, "%s rss", role)
		}
	}

	held, unheld, bounded := scrapeAll()
	assert.Equal(t, 3.0, held["engine-child"][0])
	same(held, unheld)
	same(held, bounded)
	// Seen once: nothing is held yet.
	assert.Equal(t, 0, s.files.Open())
	assert.Equal(t, base, openFDs(t))

	// From the second sighting on every member holds its stat, fd directory
	// and the children file of each thread (Go processes are multi-threaded:
	// plus the task directory).
	held, unheld, bounded = scrapeAll()
	same(held, unheld)
	same(held, bounded)
	assert.Greater(t, s.files.Open(), 7*3)
	assert.Equal(t, 0, none.files.Open())
	assert.Equal(t, 5, few.files.Open())
	assert.Equal(t, base+s.files.Open()+few.files.Open(), openFDs(t), "held files are counted exactly")

	// The third scrape reads through the held files.
	held, unheld, bounded = scrapeAll()
	same(held, unheld)
	same(held, bounded)
	assert.Equal(t, base+s.files.Open()+few.files.Open(), openFDs(t))

	// A child and its grandchild exit: their files are closed.
	w := s.kinds[0].instances["held"]
	gone := w.members[int32(tr.pids[1])]
	require.NotNil(t, gone)
	require.True(t, gone.files.HoldsStat())
	openBefore := s.files.Open()
	tr.killChild(t, 0)
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", tr.pids[1]))
		return os.IsNotExist(err)
	}, 5*time.Second, 10*time.Millisecond)
	held, unheld, bounded = scrapeAll()
	assert.Equal(t, 2.0, held["engine-child"][0])
	same(held, unheld)
	same(held, bounded)
	assert.Less(t, s.files.Open(), openBefore)
	assert.True(t, gone.files.Empty(), "the files of a member that left are closed")
	assert.Equal(t, base+s.files.Open()+few.files.Open(), openFDs(t))

	// Shutdown closes everything.
	require.NoError(t, s.shutdown(ctx))
	require.NoError(t, few.shutdown(ctx))
	assert.Equal(t, 0, s.files.Open())
	assert.Equal(t, base, openFDs(t))
}
