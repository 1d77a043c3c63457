package contract // import "github.com/workerwatch/workerwatch/internal/contract"

import (
	"encoding/binary"
	"encoding/json"
	"iter"
	"strconv"
	"time"
	"unsafe"
)

// RecentRuns is a worker's recently ended run attempts (Runs.Recent),
// newest first, packed into one byte slice: its JSON is the list of
// RunRecord as ever (MarshalJSON), and All or Records give the records.
//
// Why packed: the served snapshot holds limits.recent_runs of them for
// every worker, and as RunRecord values (112 bytes each, and a string for
// the id) they were the largest part of a steady worker's entry: packed,
// a record is its id and about 20 bytes, and the view of 10,000 workers
// holding ten runs each went from 2.10 to 1.00 KiB of RSS a worker
// (docs/results/density.md, "steady state"). It is immutable once built,
// as the snapshot is.
type RecentRuns struct{ s string } // a string: 16 bytes of every worker's entry, where a slice was 24

// bytes are the packed records (read only).
func (r RecentRuns) bytes() []byte { return unsafe.Slice(unsafe.StringData(r.s), len(r.s)) }

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

// Len is the size in bytes of the records added since the last Done.
func (p *RunPacker) Len() int { return len(p.buf) }

// DoneInto copies the records added since the last Done into dst's
// memory (the processor hands every worker's out of one block of its
// snapshot's own: tracker.block) and returns them. dst should have room
// for Len() bytes; with less, they get a slice of their own.
func (p *RunPacker) DoneInto(dst []byte) RecentRuns {
	if len(p.buf) == 0 {
		return RecentRuns{}
	}
	b := dst[:0]
	b = append(b, p.buf...)
	p.buf = p.buf[:0]
	return RecentRuns{s: unsafe.String(unsafe.SliceData(b), len(b))}
}

// Done returns the records added since the last Done, in a slice of their
// own size.
func (p *RunPacker) Done() RecentRuns {
	if len(p.buf) == 0 {
		return RecentRuns{}
	}
	return p.DoneInto(make([]byte, len(p.buf)))
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

// packed is one record as the packing holds it: the id's bytes (within the
// packing), the names, the times in Unix nanoseconds (0 = unknown).
type packed struct {
	id             []byte
	attempt        int
	result, kill   string
	started, ended int64
}

// next decodes the record at the start of b and returns the rest; ok is
// false at the end of b, or where the packing is broken (the packer never
// writes that: a broken packing reads as ending there).
func next(b []byte) (p packed, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return p, nil, false
	}
	p.id, b = b[k:k+int(n)], b[k+int(n):]
	attempt, k := binary.Varint(b)
	if k <= 0 {
		return p, nil, false
	}
	p.attempt, b = int(attempt), b[k:]
	if p.result, b, ok = readName(b, runResults[:]); !ok {
		return p, nil, false
	}
	if p.kill, b, ok = readName(b, KillReasons[:]); !ok || len(b) == 0 {
		return p, nil, false
	}
	flags := b[0]
	b = b[1:]
	if flags&packStarted != 0 {
		if p.started, k = binary.Varint(b); k <= 0 {
			return p, nil, false
		}
		b = b[k:]
	}
	if flags&packEnded != 0 {
		d, k := binary.Varint(b)
		if k <= 0 {
			return p, nil, false
		}
		p.ended, b = p.started+d, b[k:]
	}
	return p, b, true
}

func readName(b []byte, table []string) (string, []byte, bool) {
	if len(b) == 0 {
		return "", nil, false
	}
	switch c := int(b[0]); {
	case c == 0:
		return "", b[1:], true
	case c <= len(table):
		return table[c-1], b[1:], true
	case c == nameOther:
		n, k := binary.Uvarint(b[1:])
		if k <= 0 || n > uint64(len(b)-1-k) {
			return "", nil, false
		}
		return string(b[1+k : 1+k+int(n)]), b[1+k+int(n):], true
	}
	return "", nil, false
}

// seconds is the run's duration, as the processor states it: 0 unless
// both times are known and the end is not before the start.
func (p *packed) seconds() float64 {
	if p.started == 0 || p.ended == 0 || p.ended < p.started {
		return 0
	}
	return float64(p.ended-p.started) / 1e9
}

func (p *packed) record() RunRecord {
	rec := RunRecord{ID: string(p.id), Attempt: p.attempt, Result: p.result, KillReason: p.kill, DurationSeconds: p.seconds()}
	if p.started != 0 {
		rec.Started = time.Unix(0, p.started).UTC()
	}
	if p.ended != 0 {
		rec.Ended = time.Unix(0, p.ended).UTC()
	}
	return rec
}

// All yields the records, newest first.
func (r RecentRuns) All() iter.Seq[RunRecord] {
	return func(yield func(RunRecord) bool) {
		for b := r.bytes(); ; {
			p, rest, ok := next(b)
			if !ok || !yield(p.record()) {
				return
			}
			b = rest
		}
	}
}

// Len is the number of records.
func (r RecentRuns) Len() int {
	n := 0
	for b := r.bytes(); ; n++ {
		_, rest, ok := next(b)
		if !ok {
			return n
		}
		b = rest
	}
}

// Records are the records, newest first (never nil).
func (r RecentRuns) Records() []RunRecord {
	out := []RunRecord{}
	for rec := range r.All() {
		out = append(out, rec)
	}
	return out
}

// MarshalJSON is the list of records (an empty list, never null), byte
// for byte what encoding/json writes for []RunRecord, written straight
// from the packing: the health API writes it for every worker it answers
// for, and building the records first and marshaling them took twice as
// long as marshaling unpacked ones (BenchmarkRecentRunsJSON).
func (r RecentRuns) MarshalJSON() ([]byte, error) {
	out := append(make([]byte, 0, 2+4*len(r.s)), '[')
	for b, first := r.bytes(), true; ; first = false {
		p, rest, ok := next(b)
		if !ok {
			break
		}
		if !first {
			out = append(out, ',')
		}
		out = p.appendJSON(out)
		b = rest
	}
	return append(out, ']'), nil
}

// appendJSON writes the record as encoding/json writes a RunRecord (its
// field order, omitempty and omitzero).
func (p *packed) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"id":`...), p.id)
	if p.attempt != 0 {
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(p.attempt), 10)
	}
	b = appendJSONString(append(b, `,"result":`...), p.result)
	if p.kill != "" {
		b = appendJSONString(append(b, `,"kill_reason":`...), p.kill)
	}
	if p.started != 0 {
		b = append(time.Unix(0, p.started).UTC().AppendFormat(append(b, `,"started":"`...), time.RFC3339Nano), '"')
	}
	if p.ended != 0 {
		b = append(time.Unix(0, p.ended).UTC().AppendFormat(append(b, `,"ended":"`...), time.RFC3339Nano), '"')
	}
	b = append(b, `,"duration_seconds":`...)
	if d := p.seconds(); d == 0 || (d >= 1e-6 && d < 1e21) {
		b = strconv.AppendFloat(b, d, 'f', -1, 64)
	} else {
		js, _ := json.Marshal(d) // encoding/json's exponent form
		b = append(b, js...)
	}
	return append(b, '}')
}

// appendJSONString writes s as encoding/json does: as is when it is
// printable ASCII that needs no escape (a run id, a result), else through
// encoding/json (its HTML and Unicode escapes).
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			js, _ := json.Marshal(string(s))
			return append(b, js...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// UnmarshalJSON reads a list of records (null: none).
func (r *RecentRuns) UnmarshalJSON(b []byte) error {
	var rs []RunRecord
	if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	*r = PackRuns(rs)
	return nil
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
