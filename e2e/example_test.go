//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestBullMQExample runs the BullMQ example's own tests (node's test runner,
// examples/bullmq-worker/test/): what its worker and queue side send, against
// a redis-server and an OTLP sink they start themselves.
func TestBullMQExample(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	defer parallel(t, 30*time.Second)()
	need(t, "redis-server", "/usr/bin/redis-server")
	exampleNodeTests(t, "bullmq-worker", "bullmq")
}

// TestOpenFnExample runs the OpenFn example's own tests
// (examples/openfn-worker/test/): the host of the real engine and the
// Lightning stand-in, every reason the engine reports, against an OTLP sink.
func TestOpenFnExample(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	// Alone, in the suite's sequential part: beside the parallel scenarios
	// it failed clean CI runs of the merged wave on 2 cores (issue 19).
	exampleNodeTests(t, "openfn-worker", filepath.Join("@openfn", "engine-multi"))
}

// exampleNodeTests runs `node --test test/` in examples/<example>, whose
// node_modules must hold pkg (scripts/install-test-deps.sh runs npm ci).
func exampleNodeTests(t *testing.T, example, pkg string) {
	dir := filepath.Join(repoRoot, "examples", example)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("examples/%s/node_modules missing (scripts/install-test-deps.sh runs npm ci)", example)
		}
		t.Skipf("examples/%s/node_modules missing: run npm ci there", example)
	}
	// Bounded: a test that hangs (a worker that never exits, a server that
	// never answers) fails with node's own report of which test timed out,
	// and the whole run, with whatever it started, is ended by its process
	// group (in CI this once hung until the package's timeout).
	const perTest, whole = 4 * time.Minute, 8 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), whole)
	defer cancel()
	cmd := exec.CommandContext(ctx, need(t, "node"), "--test", fmt.Sprintf("--test-timeout=%d", perTest.Milliseconds()), "test/")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the tests left behind
	}
	if ctx.Err() != nil {
		t.Fatalf("node --test in %s: not done within %s (killed)\n%s", dir, whole, out)
	}
	if err != nil {
		t.Fatalf("node --test in %s: %v\n%s", dir, err, out)
	}
	t.Logf("e2e: examples/%s tests passed", example)
}
