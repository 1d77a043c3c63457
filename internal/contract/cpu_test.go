package contract

import "testing"

func TestCPUDefinition(t *testing.T) {
	for _, tc := range []struct {
		name                string
		affinity            int
		quota, period       float64
		wantLimit           float64
		cpuSec, wallSec     float64
		wantUtil, wantCores float64
	}{
		{"pinned to one CPU, one core busy", 1, 0, 0, 1, 3, 3, 1, 1},
		{"16 CPUs, one core busy", 16, 0, 0, 16, 3, 3, 1.0 / 16, 1},
		{"pod limited to 1 CPU on 16 cores", 16, 100000, 100000, 1, 0.3, 3, 0.1, 0.1},
		{"half a CPU by cpu.max", 4, 50000, 100000, 0.5, 1, 2, 1, 0.5},
		{"quota larger than the affinity", 2, 400000, 100000, 2, 2, 2, 0.5, 1},
		{"no affinity known, quota only", 0, 200000, 100000, 2, 1, 1, 0.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := CPULimit(tc.affinity, tc.quota, tc.period)
			if lim != tc.wantLimit {
				t.Fatalf("CPULimit = %v, want %v", lim, tc.wantLimit)
			}
			u := Utilization(tc.cpuSec, tc.wallSec, lim)
			if d := u - tc.wantUtil; d > 1e-12 || d < -1e-12 {
				t.Fatalf("Utilization = %v, want %v", u, tc.wantUtil)
			}
			if c := Cores(u, lim); c-tc.wantCores > 1e-12 || c-tc.wantCores < -1e-12 {
				t.Fatalf("Cores = %v, want %v", c, tc.wantCores)
			}
		})
	}
	if Utilization(1, 0, 1) != 0 || Utilization(1, 1, 0) != 0 || CPULimit(0, 0, 0) != 0 {
		t.Fatal("degenerate inputs must give 0")
	}
}
