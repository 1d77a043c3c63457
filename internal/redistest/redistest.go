// Package redistest starts real redis-server processes for tests, on free
// loopback ports, each stopped when its test ends. Without redis-server a
// test is skipped locally and fails in CI (CI=true):
// scripts/install-test-deps.sh installs it.
package redistest // import "github.com/workerwatch/workerwatch/internal/redistest"

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// Bin is redis-server's path. Without it the test is skipped, or fails
// where CI=true.
func Bin(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redis-server not found (scripts/install-test-deps.sh installs it): %v", err)
		}
		tb.Skipf("redis-server not found: %v", err)
	}
	return bin
}

// Exec starts redis-server with exactly args (a sentinel's configuration, a
// TLS-only port...) and kills and reaps it when the test ends (on Linux it
// also dies with the test binary: procAttr). The caller waits until it
// answers.
func Exec(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(Bin(tb), args...) //nolint:gosec // G204: a test helper; the arguments are the test's own
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Server is a redis-server Start or StartOn started.
type Server struct {
	// Addr is 127.0.0.1:Port.
	Addr string
	Port int
	cmd  *exec.Cmd
}

// Start starts redis-server on a free loopback port, without persistence,
// its directory in tb.TempDir(), args appended (--requirepass,
// --cluster-enabled...), and returns once it answers PING (NOAUTH counts:
// with --requirepass it answers so).
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return StartOn(tb, 0, args...)
}

// StartOn is Start on a given port (0: a free one): a server stopped with
// Stop can be started again where its clients expect it.
func StartOn(tb testing.TB, port int, args ...string) *Server {
	tb.Helper()
	if port == 0 {
		port = freeport.Port(tb)
	}
	all := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tb.TempDir()}, args...)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, cmd: Exec(tb, all...)}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for err := c.Ping(context.Background()).Err(); err != nil && !strings.Contains(err.Error(), "NOAUTH"); err = c.Ping(context.Background()).Err() {
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s did not answer within 20 s: %v", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Stop kills the server and waits for its exit (before the test ends, to
// test what a client does without Redis). Stopping twice is harmless.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
