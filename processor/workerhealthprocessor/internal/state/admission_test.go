package state

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Only the evidence is kept, as a number under "ev"; a restored worker is
// confirmed when it was, else known by its records (seen-once workers are
// not checkpointed, and a record cannot make one).
func TestAdmissionCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		ev, want Evidence
	}{
		{EvidenceOnce, EvidenceRecords},
		{EvidenceRecords, EvidenceRecords},
		{EvidenceConfirmed, EvidenceConfirmed},
	} {
		a := Admission{Evidence: tc.ev, Admitted: 7, Unannounced: true}
		rec := a.Checkpoint()
		b, err := json.Marshal(rec)
		require.NoError(t, err)
		var back AdmissionRecord
		require.NoError(t, json.Unmarshal(b, &back))
		var r Admission
		r.Restore(&back)
		assert.Equal(t, Admission{Evidence: tc.want}, r, "evidence %d (%s)", tc.ev, b)
	}
	assert.Equal(t, 3, int(NEvidence))
}
