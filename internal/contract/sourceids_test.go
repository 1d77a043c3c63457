package contract

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A source's ids are written as the []string they were before they were
// shared (escapes and a worker id that is not UTF-8 included), [] when
// there is none, and read back as the same list.
func TestSourceIDsJSONAsList(t *testing.T) {
	prefixes := []string{"cicd.worker.id=", "worker_name="}
	for _, c := range []struct {
		ids  SourceIDs
		want []string
	}{
		{SourceIDs{}, []string{}},
		{IDList(), []string{}},
		{PrefixedIDs(&prefixes, "w1"), []string{"cicd.worker.id=w1", "worker_name=w1"}},
		{PrefixedIDs(&prefixes, "<w&\xff>"), []string{"cicd.worker.id=<w&\xff>", "worker_name=<w&\xff>"}},
		{IDList("k=<script>"), []string{"k=<script>"}},
	} {
		want, err := json.Marshal(c.want)
		require.NoError(t, err)
		got, err := json.Marshal(c.ids)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
		assert.Equal(t, c.want, c.ids.List())
		assert.Equal(t, len(c.want), c.ids.Len())
		var back SourceIDs
		require.NoError(t, json.Unmarshal(got, &back))
		var wantBack []string
		require.NoError(t, json.Unmarshal(want, &wantBack))
		assert.Equal(t, wantBack, back.List())
	}
	var s SourceIDs
	require.NoError(t, json.Unmarshal([]byte(`null`), &s))
	assert.Zero(t, s.Len())
	assert.Error(t, json.Unmarshal([]byte(`"k=v"`), &s), "a string, not a list")
}
