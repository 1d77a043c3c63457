package cli

import (
	"fmt"
	"strings"
)

// Fault is what a simulated worker does wrong (docs/simulator.md).
type Fault string

// The faults. Each one produces a different health state in workerwatch.
const (
	FaultNone       Fault = "none"        // healthy
	FaultLeak       Fault = "leak"        // main process memory grows per run
	FaultHang       Fault = "hang"        // heartbeats, stops claiming
	FaultDropClaims Fault = "drop-claims" // scheduler-side: claim responses lost
	FaultOrphan     Fault = "orphan"      // acks too late, runs what the scheduler took back
	FaultTimeout    Fault = "timeout"     // runs outlive the run timeout and are killed
	FaultOOM        Fault = "oom"         // runs outgrow the per-run memory limit and are killed
	FaultBusy       Fault = "busy"        // the main process burns a share of one core
)

// Faults lists every fault in the order the docs present them.
var Faults = []Fault{FaultLeak, FaultHang, FaultDropClaims, FaultOrphan, FaultTimeout, FaultOOM, FaultBusy, FaultNone}

// ParseFault checks one fault name.
func ParseFault(s string) (Fault, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return FaultNone, nil
	}
	for _, f := range Faults {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = string(f)
	}
	return "", fmt.Errorf("unknown fault %q (known: %s)", s, strings.Join(names, ", "))
}

// ParseFaults parses a comma list applied to n workers in order; missing
// entries are "none", more entries than workers is an error because it
// almost certainly means a typo in --workers.
func ParseFaults(list string, n int) ([]Fault, error) {
	out := make([]Fault, n)
	for i := range out {
		out[i] = FaultNone
	}
	if strings.TrimSpace(list) == "" {
		return out, nil
	}
	parts := strings.Split(list, ",")
	if len(parts) > n {
		return nil, fmt.Errorf("%d faults listed for %d workers", len(parts), n)
	}
	for i, p := range parts {
		f, err := ParseFault(p)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}
