package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"20MiB": 20 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "30MB": 30e6, "4096": 4096, "1.5M": 3 << 19, "7B": 7,
	} {
		got, err := ParseBytes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "MiB", "-1", "12XB", "ten"} {
		_, err := ParseBytes(bad)
		require.Error(t, err, bad)
	}
	b := Bytes(20 << 20)
	assert.Equal(t, "20MiB", b.String())
}

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults("leak, hang,,oom", 6)
	require.NoError(t, err)
	assert.Equal(t, []Fault{FaultLeak, FaultHang, FaultNone, FaultOOM, FaultNone, FaultNone}, got)
	_, err = ParseFaults("leak,boom", 3)
	require.EqualError(t, err, `unknown fault "boom" (known: leak, hang, drop-claims, orphan, timeout, oom, busy, none)`)
	_, err = ParseFaults("leak,hang", 1)
	assert.Error(t, err)
}
