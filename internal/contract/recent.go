package contract // import "github.com/workerwatch/workerwatch/internal/contract"

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"iter"
	"time"
)

// RecentRuns is a worker's recently ended run attempts (Runs.Recent),
// newest first, packed into one byte slice: its JSON is the list of
// RunRecord as ever (MarshalJSON), and All or Records give the records.
//
// Why packed: the served snapshot holds limits.recent_runs of them for
// every worker, and as RunRecord values (112 bytes each, and a string for
// the id) they were the largest part of a steady worker's entry, about
// 1.3 KiB of the view's 2.0 KiB a worker at 10,000 workers; packed, a
// record is its id and about 20 bytes (docs/results/density.md, "steady
// state"). It is immutable once built, as the snapshot is.
type RecentRuns struct{ b []byte }

// PackRuns packs records, newest first, as given.
func PackRuns(rs []RunRecord) RecentRuns {
	var p RunPacker
	for i := range rs {
		r := &rs[i]
		p.Add([]byte(r.ID), r.Attempt, r.Result, r.KillReason, unixNano(r.Started), unixNano(r.Ended))
	}
	return p.Done()
}

// RunPacker builds a RecentRuns one record at a time; its buffer is reused
// from one Done to the next (the processor packs every worker's list at
// every evaluation).
type RunPacker struct{ buf []byte }

// Flags of a packed record.
const (
	packStarted = 1 << iota // a start time follows
	packEnded               // an end time follows (after the start: its distance from it)
)

// Add appends a record: the run id, the attempt (0 = unknown), the result
// and kill reason ("" = none), and the start and end in Unix nanoseconds
// (0 = unknown).
func (p *RunPacker) Add(id []byte, attempt int, result, kill string, started, ended int64) {
	b := binary.AppendUvarint(p.buf, uint64(len(id)))
	b = append(b, id...)
	b = binary.AppendVarint(b, int64(attempt))
	b = appendName(b, result, runResults[:])
	b = appendName(b, kill, KillReasons[:])
	var flags byte
	if started != 0 {
		flags |= packStarted
	}
	if ended != 0 {
		flags |= packEnded
	}
	b = append(b, flags)
	if started != 0 {
		b = binary.AppendVarint(b, started)
	}
	if ended != 0 {
		b = binary.AppendVarint(b, ended-started)
	}
	p.buf = b
}

// Done returns the records added since the last Done, in a slice of their
// own size.
func (p *RunPacker) Done() RecentRuns {
	if len(p.buf) == 0 {
		return RecentRuns{}
	}
	r := RecentRuns{b: append(make([]byte, 0, len(p.buf)), p.buf...)}
	p.buf = p.buf[:0]
	return r
}

// runResults are the results a record names by index (any other is kept
// as written).
var runResults = [...]string{ResultSuccess, ResultFailure, ResultError, ResultTimeout, ResultCancellation, ResultSkip, "other"}

// nameOther: a name that is not in the table, its bytes follow.
const nameOther = 0xff

// appendName writes "" as 0, a name of the table as its index + 1, and any
// other as nameOther, its length and its bytes.
func appendName(b []byte, s string, table []string) []byte {
	if s == "" {
		return append(b, 0)
	}
	for i, t := range table {
		if t == s {
			return append(b, byte(i+1))
		}
	}
	b = append(b, nameOther)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errPacked = errors.New("recent runs: broken packing")

// All yields the records, newest first.
func (r RecentRuns) All() iter.Seq[RunRecord] {
	return func(yield func(RunRecord) bool) {
		for b := r.b; len(b) > 0; {
			var rec RunRecord
			var err error
			if rec, b, err = unpack(b); err != nil || !yield(rec) {
				return // the packer wrote it: broken is not reachable
			}
		}
	}
}

// Len is the number of records.
func (r RecentRuns) Len() int {
	n := 0
	for range r.All() {
		n++
	}
	return n
}

// Records are the records, newest first (never nil).
func (r RecentRuns) Records() []RunRecord {
	out := []RunRecord{}
	for rec := range r.All() {
		out = append(out, rec)
	}
	return out
}

// MarshalJSON is the list of records (an empty list, never null).
func (r RecentRuns) MarshalJSON() ([]byte, error) { return json.Marshal(r.Records()) }

// UnmarshalJSON reads a list of records (null: none).
func (r *RecentRuns) UnmarshalJSON(b []byte) error {
	var rs []RunRecord
	if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	*r = PackRuns(rs)
	return nil
}

func unpack(b []byte) (RunRecord, []byte, error) {
	var rec RunRecord
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return rec, nil, errPacked
	}
	rec.ID, b = string(b[k:k+int(n)]), b[k+int(n):]
	attempt, k := binary.Varint(b)
	if k <= 0 {
		return rec, nil, errPacked
	}
	rec.Attempt, b = int(attempt), b[k:]
	var err error
	if rec.Result, b, err = readName(b, runResults[:]); err != nil {
		return rec, nil, err
	}
	if rec.KillReason, b, err = readName(b, KillReasons[:]); err != nil {
		return rec, nil, err
	}
	if len(b) == 0 {
		return rec, nil, errPacked
	}
	flags := b[0]
	b = b[1:]
	var started int64
	if flags&packStarted != 0 {
		if started, k = binary.Varint(b); k <= 0 {
			return rec, nil, errPacked
		}
		b = b[k:]
		rec.Started = time.Unix(0, started).UTC()
	}
	if flags&packEnded != 0 {
		d, k := binary.Varint(b)
		if k <= 0 {
			return rec, nil, errPacked
		}
		b = b[k:]
		rec.Ended = time.Unix(0, started+d).UTC()
		if started != 0 && d >= 0 {
			rec.DurationSeconds = float64(d) / 1e9
		}
	}
	return rec, b, nil
}

func readName(b []byte, table []string) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, errPacked
	}
	switch c := int(b[0]); {
	case c == 0:
		return "", b[1:], nil
	case c <= len(table):
		return table[c-1], b[1:], nil
	case c == nameOther:
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n > uint64(len(b)-1-k) {
			return "", nil, errPacked
		}
		return string(b[1+k : 1+k+int(n)]), b[1+k+int(n):], nil
	}
	return "", nil, errPacked
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
