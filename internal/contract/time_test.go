package contract

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Time's JSON is the bytes its time.Time in UTC had (the API's schema
// did not change when the snapshot's instants became Unix nanoseconds),
// and reads back to the same instant; the zero time is 0 both ways.
func TestTimeJSONAsTimeTime(t *testing.T) {
	for _, ns := range []int64{0, 1, 1764936000123456789, 1764936000000000000, -1, -1<<63 + 1, 1<<63 - 1} {
		was := time.Time{}
		if ns != 0 {
			was = time.Unix(0, ns).UTC()
		}
		want, err := json.Marshal(was)
		require.NoError(t, err)
		got, err := json.Marshal(Time(ns))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "ns %d", ns)
		var back Time
		require.NoError(t, json.Unmarshal(got, &back))
		assert.Equal(t, Time(ns), back, "ns %d", ns)
		assert.Equal(t, was, Time(ns).Time())
		assert.Equal(t, Time(ns), TimeOf(was))
	}
	// omitzero leaves out 0, as it left out the zero time.Time.
	type s struct {
		At Time `json:"at,omitzero"`
	}
	got, err := json.Marshal(s{})
	require.NoError(t, err)
	assert.JSONEq(t, `{}`, string(got))
	// Another zone reads as its instant; null leaves the value; what is not
	// a time, or outside the years int64 nanoseconds hold, is an error.
	var at Time = 7
	require.NoError(t, json.Unmarshal([]byte(`"2026-12-05T14:00:00+01:00"`), &at))
	assert.Equal(t, "2026-12-05 13:00:00 +0000 UTC", at.String())
	require.NoError(t, json.Unmarshal([]byte(`null`), &at))
	assert.Equal(t, TimeOf(time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)), at)
	require.Error(t, json.Unmarshal([]byte(`"yesterday"`), &at))
	err = json.Unmarshal([]byte(`"1500-01-01T00:00:00Z"`), &at)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1678-2262")
}
