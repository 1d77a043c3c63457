package contract

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The components meet only through this package: the extension never
// imports the processor or the receiver, and the processor neither the
// extension nor the receiver (issue 11). `go list -deps` is the truth.
func TestComponentsMeetOnlyThroughTheContract(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/workerwatch/workerwatch/"
	deps := func(pattern string) []string {
		out, err := exec.Command("go", "list", "-deps", mod+pattern).CombinedOutput()
		require.NoError(t, err, "go list -deps %s: %s", pattern, out)
		return strings.Fields(string(out))
	}
	for pattern, forbidden := range map[string][]string{
		"extension/...": {mod + "processor/", mod + "receiver/"},
		"processor/...": {mod + "extension/", mod + "receiver/"},
		"receiver/...":  {mod + "extension/", mod + "processor/"},
	} {
		list := deps(pattern)
		assert.Contains(t, list, mod+"internal/contract", "%s uses the contract", pattern)
		for _, d := range list {
			for _, f := range forbidden {
				assert.False(t, strings.HasPrefix(d, f), "%s depends on %s", pattern, d)
			}
		}
	}
}
