//go:build linux

package workerprocessreceiver

// What the receiver reads and exports that could be secret: command lines
// (only the opt-in, redacted process.command_line of the top-N series) and
// environments (only the variable named by an id/name template, never
// exported unless it is that template's value).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/procfs"
	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

func TestRedactDefaults(t *testing.T) {
	r, err := newRedactor(nil)
	require.NoError(t, err)
	for _, tc := range []struct{ in, want string }{
		{"node worker.js --token=abc123 --id w1", "node worker.js --token=*** --id w1"},
		{"node worker.js --token abc123", "node worker.js --token ***"},
		{"agent -password hunter2 -v", "agent -password *** -v"},
		{"agent --DB-Password=hunter2", "agent --DB-Password=***"},
		{"agent --api-key=k --api_key k2 --secret-file=/run/s", "agent --api-key=*** --api_key *** --secret-file=***"},
		{"agent --aws-credentials=AKIA:xyz", "agent --aws-credentials=***"},
		{"sh -c AWS_SECRET_ACCESS_KEY=abc GITHUB_TOKEN=ghp_x node w.js", "sh -c AWS_SECRET_ACCESS_KEY=*** GITHUB_TOKEN=*** node w.js"},
		{"curl -H Authorization: Bearer eyJhbGciOi.x.y http://h/", "curl -H Authorization: Bearer *** http://h/"},
		{"worker --db postgres://app:s3cr3t@db:5432/jobs", "worker --db postgres://***@db:5432/jobs"},
		{"worker --queue amqp://guest:guest@mq/", "worker --queue amqp://***@mq/"},
		// Nothing secret: unchanged.
		{"workersim worker --id w1 --capacity 5", "workersim worker --id w1 --capacity 5"},
		{"node /srv/engine-multi/dist/child/runner.js", "node /srv/engine-multi/dist/child/runner.js"},
		{"worker --url https://example.com/a", "worker --url https://example.com/a"},
	} {
		assert.Equal(t, tc.want, r.apply(tc.in), "in: %s", tc.in)
	}
}

func TestRedactConfiguredBoundedAndValid(t *testing.T) {
	r, err := newRedactor([]string{`(--license )\S+`, `sk-[A-Za-z0-9]+`})
	require.NoError(t, err)
	assert.Equal(t, "app --license *** --openai *** --token=***", r.apply("app --license L-42 --openai sk-abcDEF --token=t"))

	long := "app --token=x " + strings.Repeat("é", 2000) + "\xff"
	out := r.apply(long)
	assert.LessOrEqual(t, len(out), maxCommandLine+len("\uFFFD"))
	assert.True(t, strings.HasPrefix(out, "app --token=*** "))
	assert.Equal(t, out, strings.ToValidUTF8(out, "?"), "valid UTF-8")
	assert.Equal(t, "a\uFFFDb", r.apply("a\xff\xfeb"))

	_, err = newRedactor([]string{"ok", "("})
	require.ErrorContains(t, err, "top_processes_command_line.redact[1]: error parsing regexp")
}

func TestCommandLineConfigValidation(t *testing.T) {
	base := func() *Config {
		cfg := createDefaultConfig().(*Config)
		cfg.Workers = []WorkerConfig{{ID: "a", Selector: SelectorConfig{Executable: "node"}}}
		return cfg
	}
	assert.False(t, base().TopProcessesCommandLine.Enabled, "off by default")
	assert.Empty(t, base().TopProcessesCommandLine.Redact)
	assert.NotContains(t, metadata.NewDefaultMetricsBuilderConfig().Metrics.WorkerwatchProcessTopMemoryUsage.EnabledAttributes,
		metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine, "the attribute is opt-in")

	cfg := base()
	cfg.TopProcessesCommandLine.Enabled = true
	require.ErrorContains(t, confmap.Validate(cfg), "top_processes_command_line.enabled: needs metrics.workerwatch.process.top.memory.usage.enabled: true")
	cfg.Metrics.WorkerwatchProcessTopMemoryUsage.Enabled = true
	require.NoError(t, confmap.Validate(cfg))
	cfg.TopProcessesCommandLine.Redact = []string{"x", "a("}
	require.ErrorContains(t, confmap.Validate(cfg), "top_processes_command_line.redact[1]: error parsing regexp")

	cfg = base()
	cfg.Metrics.WorkerwatchProcessTopMemoryUsage.Enabled = true
	cfg.Metrics.WorkerwatchProcessTopMemoryUsage.EnabledAttributes = append(cfg.Metrics.WorkerwatchProcessTopMemoryUsage.EnabledAttributes,
		metadata.WorkerwatchProcessTopMemoryUsageMetricAttributeKeyProcessCommandLine)
	assert.ErrorContains(t, confmap.Validate(cfg), "process.command_line is switched on by top_processes_command_line.enabled")
}

// secretFixture is the fixture tree with secrets in the root's environment
// and in command lines.
func secretFixture(t *testing.T) string {
	root := copyFixture(t)
	proc := filepath.Join(root, "proc")
	require.NoError(t, os.WriteFile(filepath.Join(proc, "100", "environ"),
		[]byte("PATH=/bin\x00SECRET_TOKEN=hunter2-env\x00WORKER_NAME=alpha\x00DATABASE_URL=postgres://app:pw-env@db/x\x00"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "100", "cmdline"),
		[]byte("/usr/bin/workersim\x00worker\x00--id\x00w1\x00--token=hunter2-cmd\x00"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "108", "cmdline"),
		[]byte("node\x00runner.js\x00--db\x00postgres://app:pw-cmd@db/x\x00--password\x00pw2-cmd\x00"), 0o644))
	return root
}

// allText is every string a pipeline would receive from these metrics.
func allText(md pmetric.Metrics) string {
	var b strings.Builder
	b.WriteString(metricsText(md))
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		for _, v := range rms.At(i).Resource().Attributes().All() {
			b.WriteString(v.AsString() + "\n")
		}
	}
	return b.String()
}

func scrapeTwice(t *testing.T, cfg *Config) pmetric.Metrics {
	s := newTestScraper(t, cfg)
	clock := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return clock }
	require.NoError(t, s.start(context.Background(), nil))
	_, err := s.scrape(context.Background())
	require.NoError(t, err)
	clock = clock.Add(10 * time.Second)
	md, err := s.scrape(context.Background())
	require.NoError(t, err)
	return md
}

func TestNoCommandLineOrEnvironmentByDefault(t *testing.T) {
	root := secretFixture(t)
	cfg := fixtureConfig(root) // top-N on, command line off
	text := allText(scrapeTwice(t, cfg))
	assert.Contains(t, text, "cicd.worker.name=alpha", "the templated variable is the worker's name")
	for _, secret := range []string{"hunter2", "pw-env", "pw-cmd", "pw2-cmd", "SECRET_TOKEN", "DATABASE_URL", "--token", "runner.js", "process.command_line"} {
		assert.NotContains(t, text, secret)
	}
}

func TestTopProcessesCommandLineRedacted(t *testing.T) {
	root := secretFixture(t)
	cfg := fixtureConfig(root)
	cfg.TopProcesses = 10
	cfg.TopProcessesCommandLine = CommandLineConfig{Enabled: true, Redact: []string{`(--id )\S+`}}
	md := scrapeTwice(t, cfg)
	text := allText(md)
	for _, secret := range []string{"hunter2", "pw-env", "pw-cmd", "pw2-cmd", "SECRET_TOKEN"} {
		assert.NotContains(t, text, secret)
	}
	_, ok := findValue(md, "w1", "workerwatch.process.top.memory.usage",
		map[string]string{"process.pid": "100", "process.command_line": "/usr/bin/workersim worker --id *** --token=***"})
	assert.True(t, ok, "root's redacted command line:\n%s", text)
	_, ok = findValue(md, "w1", "workerwatch.process.top.memory.usage",
		map[string]string{"process.pid": "108", "process.command_line": "node runner.js --db postgres://***@db/x --password ***"})
	assert.True(t, ok, "child's redacted command line:\n%s", text)
	// Only the top-N series carries it.
	for _, line := range strings.Split(metricsText(md), "\n") {
		if strings.Contains(line, "process.command_line") {
			assert.Contains(t, line, "workerwatch.process.top.memory.usage")
		}
	}
}

// The environ reader returns only the named variable (internal/procfs
// FuzzEnviron); a worker whose id template names another variable never
// sees SECRET_TOKEN either.
func TestEnvironOnlyNamedVariable(t *testing.T) {
	root := secretFixture(t)
	r := procfs.NewReader(filepath.Join(root, "proc"))
	v, ok, err := r.Environ(100, "WORKER_NAME")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "alpha", v)

	// The kinds only ask for the variables their templates name.
	cfg := fixtureConfig(root)
	s := newTestScraper(t, cfg)
	var asked []string
	for _, k := range s.kinds {
		asked = append(asked, k.envs...)
	}
	assert.Equal(t, []string{"WORKER_NAME"}, asked)
}
