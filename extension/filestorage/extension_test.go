package filestorage

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"

	contrib "github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/extension/filestorage/internal/metadata"
)

var owner = component.MustNewIDWithName("worker_health", "a/b") // sanitized in the file name

// newExt builds the extension on dir and returns it with its log.
func newExt(t *testing.T, dir string, recreate bool) (storage.Extension, *observer.ObservedLogs) {
	t.Helper()
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*contrib.Config)
	cfg.Directory, cfg.Compaction.Directory, cfg.Recreate = dir, dir, recreate
	require.NoError(t, cfg.Validate())
	core, logs := observer.New(zap.InfoLevel)
	set := extensiontest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	ext, err := f.Create(context.Background(), set, cfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, ext.Shutdown(context.Background())) })
	return ext.(storage.Extension), logs
}

// write stores enough to span many pages (so a cut lands inside them).
func write(t *testing.T, dir string) string {
	ext, _ := newExt(t, dir, false)
	ctx := context.Background()
	c, err := ext.GetClient(ctx, component.KindProcessor, owner, "")
	require.NoError(t, err)
	big := make([]byte, 64<<10)
	for i := range 16 {
		require.NoError(t, c.Set(ctx, "key"+string(rune('a'+i)), big))
	}
	require.NoError(t, c.Set(ctx, "small", []byte("kept")))
	require.NoError(t, c.Close(ctx))
	files, err := filepath.Glob(filepath.Join(dir, "processor_worker_health_*"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, (&checked{cfg: &contrib.Config{Directory: dir}}).filePath(component.KindProcessor, owner, ""), files[0], "the path contrib uses")
	return files[0]
}

func TestCorruptFilesAreMovedAside(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, path string)
		want    string
	}{
		{"truncated", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, 8192)) }, "truncated"},
		{"random bytes", func(t *testing.T, path string) {
			b := make([]byte, 4096)
			_, _ = rand.Read(b)
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}, "not a bbolt file"},
		{"random bytes, many pages", func(t *testing.T, path string) {
			b := make([]byte, 1<<20)
			_, _ = rand.Read(b)
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}, "not a bbolt file"},
		{"empty", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, 0)) }, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := write(t, dir)
			tc.corrupt(t, path)

			// Without recreate: an error naming the file, no crash.
			ext, _ := newExt(t, dir, false)
			_, err := ext.GetClient(context.Background(), component.KindProcessor, owner, "")
			require.ErrorContains(t, err, "storage file "+path+" is corrupt")
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "recreate: true")

			// With recreate: moved aside, said once with its path, a new one.
			ext, logs := newExt(t, dir, true)
			c, err := ext.GetClient(context.Background(), component.KindProcessor, owner, "")
			require.NoError(t, err)
			v, err := c.Get(context.Background(), "small")
			require.NoError(t, err)
			assert.Nil(t, v, "a new, empty file")
			require.NoError(t, c.Set(context.Background(), "small", []byte("new")))
			require.NoError(t, c.Close(context.Background()))
			moved := logs.FilterMessageSnippet("corrupt").All()
			require.Len(t, moved, 1)
			assert.Equal(t, path, moved[0].ContextMap()["file"])
			backups, _ := filepath.Glob(path + ".*.backup")
			require.Len(t, backups, 1)
			assert.Equal(t, backups[0], moved[0].ContextMap()["moved_to"])
		})
	}
}

// A sound file is opened as it is, its data intact, nothing logged.
func TestSoundFileIsKept(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir)
	ext, logs := newExt(t, dir, true)
	c, err := ext.GetClient(context.Background(), component.KindProcessor, owner, "")
	require.NoError(t, err)
	v, err := c.Get(context.Background(), "small")
	require.NoError(t, err)
	assert.Equal(t, []byte("kept"), v)
	require.NoError(t, c.Close(context.Background()))
	assert.Zero(t, logs.FilterMessageSnippet("corrupt").Len())
	backups, _ := filepath.Glob(path + ".*.backup")
	assert.Empty(t, backups)
}

// A file another client holds open is not judged (the check cannot take
// its lock): contrib's own open reports the lock, nothing is moved.
func TestLockedFileIsNotMoved(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir)
	ext, _ := newExt(t, dir, true)
	holder, err := ext.GetClient(context.Background(), component.KindProcessor, owner, "")
	require.NoError(t, err)
	defer holder.Close(context.Background())
	assert.NoError(t, checkFile(path, 0), "a locked file is not corrupt")
}

// A file whose meta pages are sound and claim no more pages than the file
// holds, but whose tree points past its end: reading it faults (SIGBUS),
// which the check turns into an error instead of a crash.
func TestFaultWhileReadingIsCaught(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir)
	const page = 4096
	require.NoError(t, os.Truncate(path, 4*page))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, off := range []int64{0, page} {
		meta := make([]byte, 64)
		_, err := f.ReadAt(meta, off+16) // after the page header
		require.NoError(t, err)
		binary.LittleEndian.PutUint64(meta[40:], 4) // high-water mark: the 4 pages left
		h := fnv.New64a()
		_, _ = h.Write(meta[:56])
		binary.LittleEndian.PutUint64(meta[56:], h.Sum64())
		_, err = f.WriteAt(meta, off+16)
		require.NoError(t, err)
	}
	err = checkFile(path, 0)
	require.ErrorContains(t, err, "reading it failed")
}
