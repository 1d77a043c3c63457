package contract // import "github.com/workerwatch/workerwatch/internal/contract"

import "time"

// Time is an instant in Unix nanoseconds, 0 for none (a zero time.Time),
// with the JSON of a time.Time in UTC: the same bytes the API served when
// these fields were time.Time values made by time.Unix(0, ns).UTC(), the
// zero time included ("0001-01-01T00:00:00Z").
//
// Why not time.Time: the served snapshot holds six instants for every
// worker (when its state began, when it was last seen, its last memory
// sample, each source's last record), and a time.Time is 24 bytes (its
// wall clock, its monotonic reading and its location) where the processor
// keeps each as 8. At 100,000 workers that was 9 MiB of the view
// (docs/results/density.md, "instants as Unix nanoseconds").
//
// Instants outside what int64 nanoseconds hold (before 1678 or after 2262)
// do not come from the processor; UnmarshalJSON refuses them.
type Time int64

// TimeOf is t as a Time (0 for the zero time).
func TimeOf(t time.Time) Time { return Time(unixNano(t)) }

// Time is the instant as a time.Time in UTC (the zero time for 0).
func (t Time) Time() time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}

// IsZero reports whether no instant is set (json's omitzero reads it).
func (t Time) IsZero() bool { return t == 0 }

// Sub is t - u as a duration (each as its time.Time: the zero time is
// year 1).
func (t Time) Sub(u time.Time) time.Duration { return t.Time().Sub(u) }

// MarshalJSON writes the instant as time.Time does (RFC 3339 with
// nanoseconds, in UTC).
func (t Time) MarshalJSON() ([]byte, error) { return t.Time().MarshalJSON() }

// UnmarshalJSON reads what MarshalJSON writes (any RFC 3339 instant; JSON
// null leaves t as it is, as for a time.Time).
func (t *Time) UnmarshalJSON(b []byte) error {
	var v time.Time
	if err := v.UnmarshalJSON(b); err != nil {
		return err
	}
	if string(b) == "null" {
		return nil
	}
	if !v.IsZero() && (v.Before(minTime) || v.After(maxTime)) {
		return &time.ParseError{Layout: time.RFC3339, Value: string(b), Message: ": outside the years 1678-2262 that a Unix time in nanoseconds holds"}
	}
	*t = TimeOf(v)
	return nil
}

var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// String is the instant as time.Time prints it (in UTC).
func (t Time) String() string { return t.Time().String() }
