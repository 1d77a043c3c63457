//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBullMQExample runs the BullMQ example's own tests (node's test runner,
// examples/bullmq-worker/test/): what its worker and queue side send, against
// a redis-server and an OTLP sink they start themselves.
func TestBullMQExample(t *testing.T) {
	dir := filepath.Join(repoRoot, "examples", "bullmq-worker")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("examples/bullmq-worker/node_modules missing (scripts/install-test-deps.sh runs npm ci)")
		}
		t.Skipf("examples/bullmq-worker/node_modules missing: run npm ci there")
	}
	need(t, "redis-server", "/usr/bin/redis-server")
	cmd := exec.Command(need(t, "node"), "--test", "test/")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test in %s: %v\n%s", dir, err, out)
	}
	t.Logf("e2e: examples/bullmq-worker tests passed")
}
