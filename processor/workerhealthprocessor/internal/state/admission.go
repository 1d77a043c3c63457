package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

// Evidence is how much the processor knows a worker exists.
type Evidence uint8

const (
	EvidenceOnce Evidence = iota
	EvidenceRecords
	EvidenceConfirmed
	NEvidence
)

// Admission is how much the processor knows a worker exists, the evaluation
// it was admitted in, and whether a state change while it was seen once is
// still to be announced. (Its place in the tracker's admission lists is the
// processor's.)
type Admission struct {
	// Admitted: the low 32 bits of the tracker's count of evaluations when
	// the worker was admitted, compared by their difference (which wraps
	// safely): 8 bytes a worker less than the whole count.
	Admitted    uint32
	Evidence    Evidence
	Unannounced bool
}

// AdmissionRecord is the admission's checkpoint record: EvidenceRecords or
// EvidenceConfirmed (workers seen once are not checkpointed).
type AdmissionRecord struct {
	Evidence Evidence `json:"ev"`
}

// Checkpoint is the admission's record.
func (a *Admission) Checkpoint() AdmissionRecord { return AdmissionRecord{Evidence: a.Evidence} }

// Restore takes the record back: confirmed stays confirmed, anything else
// has records.
func (a *Admission) Restore(c *AdmissionRecord) {
	a.Evidence = EvidenceRecords
	if c.Evidence == EvidenceConfirmed {
		a.Evidence = EvidenceConfirmed
	}
}
