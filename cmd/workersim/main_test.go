//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bin is the workersim binary under test, built once in TestMain: the
// simulator re-executes itself, so the tests need a real binary.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "workersim-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "workersim")
	args := []string{"build", "-o", bin}
	if os.Getenv("WORKERSIM_RACE") != "" {
		// Opt-in: a race-instrumented simulator is slower and bigger.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building workersim:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestInvalidInput(t *testing.T) {
	t.Setenv("WORKER_NAME", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "--faults", "leak,bogus"}, `workersim fleet: --faults: unknown fault "bogus"`},
		{[]string{"fleet", "--workers", "2", "--faults", "leak,hang,oom"}, "workersim fleet: --faults: 3 faults listed for 2 workers"},
		{[]string{"fleet", "--workers", "0"}, "workersim fleet: --workers must be between 1 and 1000, got 0"},
		{[]string{"fleet", "--nope"}, "workersim fleet: flag provided but not defined: -nope"},
		{[]string{"fleet", "--run-memory", "12XB"}, `workersim fleet: invalid value "12XB" for flag -run-memory`},
		{[]string{"fleet", "extra"}, `workersim fleet: unexpected argument "extra"`},
		{[]string{"worker", "--scheduler", "127.0.0.1:1"}, "workersim worker: --id is required"},
		{[]string{"worker", "--id", "w", "--scheduler", "x", "--fault", "slow"}, `workersim worker: --fault: unknown fault "slow"`},
		{[]string{"scheduler", "--claim-timeout", "soon"}, `workersim scheduler: invalid value "soon" for flag -claim-timeout`},
		{[]string{"run-child", "--memory", "1MiB"}, "workersim run-child: --run-id is required"},
		{[]string{"explode"}, `workersim: unknown command "explode"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, tt.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("want exit code 2, got %v (stderr %q)", err, stderr.String())
			}
			out := strings.TrimRight(stderr.String(), "\n")
			if strings.Count(out, "\n") != 0 {
				t.Errorf("want ONE error line, got:\n%s", out)
			}
			if !strings.HasPrefix(out, tt.want) {
				t.Errorf("stderr = %q, want prefix %q", out, tt.want)
			}
		})
	}
}
