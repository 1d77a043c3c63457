package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// Incarnations (docs/health-rules.md, "Incarnations"): one life of a
// worker, its root process (pid + start time) or what its telemetry says.
// The memory episodes, the CPU episode and the kills window belong to one
// incarnation: a new one starts them afresh, seen live or after a restore.

// Incarnation is an incarnation as a sample or a record states it (none
// known unless Known); a worker keeps its current one as a
// CurrentIncarnation. A process's ID is "" until Name sets it, and a
// CurrentIncarnation does not hold it (contract.Incarnation.Name makes it).
type Incarnation struct {
	ID     string
	Source contract.IncarnationSource
	PID    int64
	// Started is when the process started (unix ns, 0 = unknown);
	// FirstSeen when the processor first saw the incarnation.
	Started, FirstSeen int64
}

// CurrentIncarnation is a worker's current incarnation as the tracker keeps
// it: the health API's view of it (nil = none known), never changed once
// made and replaced by a new one whenever anything in it changes (a
// published snapshot is immutable). Every evaluation hands the same view on
// while the incarnation is unchanged, and the worker keeps one pointer: the
// incarnation kept inline beside a pointer to its view was 64 bytes a
// worker, and the tracker's Worker one size class larger (TestWorkerSize).
type CurrentIncarnation struct{ v *contract.Incarnation }

// Get is the current incarnation (the zero Incarnation when none is known).
func (c CurrentIncarnation) Get() Incarnation {
	if c.v == nil {
		return Incarnation{}
	}
	return Incarnation{ID: c.v.ID, Source: c.v.Source, PID: c.v.PID, Started: int64(c.v.Started), FirstSeen: int64(c.v.FirstSeen)}
}

// ID is the current incarnation's ID ("" = none known), made for a process
// (allocates: for the reasons it is stamped on, not for every sample).
func (c CurrentIncarnation) ID() string {
	if c.v == nil {
		return ""
	}
	return c.v.Name()
}

// Known reports whether the worker has a current incarnation.
func (c CurrentIncarnation) Known() bool { return c.v != nil }

// Known reports whether an incarnation is stated: an id, or a process's pid.
func (in *Incarnation) Known() bool { return in.ID != "" || in.PID > 0 }

// Set makes in the current incarnation (none unless in is Known), with a
// new view only when something in it changed. A process's ID is not held
// when its pid and start time make it (contract.Incarnation.Name).
func (c *CurrentIncarnation) Set(in Incarnation) {
	if !in.Known() {
		c.v = nil
		return
	}
	s := contract.Incarnation{ID: in.ID, Source: in.Source, PID: in.PID, Started: contract.Time(in.Started), FirstSeen: contract.Time(in.FirstSeen)}
	if s.PID > 0 && s.ID != "" && s.ID == contract.ProcessIncarnationID(s.PID, s.Started) {
		s.ID = ""
	}
	if c.v == nil || *c.v != s {
		v := s // s itself stays on the stack: only a change allocates
		c.v = &v
	}
}

// Snapshot is the health API's view (nil when none is known).
func (c CurrentIncarnation) Snapshot() *contract.Incarnation { return c.v }

// startSlack is how far two start times of one pid may differ and still be
// one process: the receiver states the start from the host's boot time,
// which the kernel may restate by a second when the clock is stepped, and
// a collector restarted in between reads it again. No pid is reused within
// two seconds of the same start.
const startSlack = int64(2 * time.Second)

// Same reports whether two incarnations are the same process (or
// instance): the same pid started at the same time (whichever source
// stated it: the tree's root and the telemetry's process detector may name
// one process), else the same id from the same source.
//
// An instance known only by its service.instance.id (in, no pid) and a
// process (o) are one life when the process had started by the time the
// instance was first seen: a worker's telemetry often reaches the
// collector before the receiver's next discovery finds its tree, and that
// tree is the process the telemetry came from, not a restart. A process
// that started later is a new incarnation.
func (in *Incarnation) Same(o *Incarnation) bool {
	if in.PID == 0 && o.PID != 0 && in.Source == contract.IncarnationServiceInstance {
		return o.Started == 0 || o.Started < in.FirstSeen+startSlack
	}
	if in.PID != 0 && o.PID != 0 {
		if in.PID != o.PID {
			return false
		}
		if in.Started == 0 || o.Started == 0 {
			return true
		}
		d := in.Started - o.Started
		return d < startSlack && -d < startSlack
	}
	return in.Source == o.Source && in.ID == o.ID
}

// IncarnationOf is the incarnation a sample's or a record's resource
// states, if any: a tree's root (pid + creation time), the telemetry's
// process (the same pair) or its service.instance.id. A process's ID is
// left to Name: nearly every sample is of the current incarnation, which
// Same tells by pid and start time, and needs none formatted.
func IncarnationOf(ref *mapping.IncRef, tree bool, now int64) (Incarnation, bool) {
	switch {
	case ref.PID > 0:
		src := contract.IncarnationProcess
		if tree {
			src = contract.IncarnationTree
		}
		return Incarnation{Source: src, PID: ref.PID, Started: ref.Started, FirstSeen: now}, true
	case ref.ServiceInstance != "":
		return Incarnation{ID: ref.ServiceInstance, Source: contract.IncarnationServiceInstance, FirstSeen: now}, true
	}
	return Incarnation{}, false
}

// Name sets a process incarnation's ID from IncarnationOf: its pid, and
// its start time when stated (contract.ProcessIncarnationID).
func (in *Incarnation) Name() {
	if in.ID != "" || in.PID <= 0 {
		return
	}
	in.ID = contract.ProcessIncarnationID(in.PID, contract.Time(in.Started))
}

// Exit is how an incarnation ended, as the receiver stated it.
type Exit struct {
	// At is when it exited (unix ns); Seen when the processor learnt it.
	At, Seen int64
	How      string // contract.Exit*
	Code     int
	Signal   int
	Inc      string // the incarnation's ID
	// Pending: no new incarnation since; the worker is lost once
	// lost.exit_grace has passed from Seen.
	Pending bool
}

// ExitOf is the exit a tree sample of an absent root states, if any.
func ExitOf(ref *mapping.IncRef, inc string, now int64) (Exit, bool) {
	if ref.ExitAt <= 0 {
		return Exit{}, false
	}
	e := Exit{At: ref.ExitAt, Seen: now, How: contract.ExitUnknown, Inc: inc, Pending: true}
	switch {
	case ref.ExitSignal > 0:
		e.How, e.Signal = contract.ExitSignal, int(ref.ExitSignal)
	case ref.ExitCode >= 0:
		e.How, e.Code = contract.ExitCode, int(ref.ExitCode)
	}
	return e, true
}

// Snapshot is the health API's view of the exit.
func (e *Exit) Snapshot() *contract.Exit {
	out := &contract.Exit{How: e.How, At: Time(e.At), Incarnation: e.Inc}
	switch e.How {
	case contract.ExitSignal:
		sig := e.Signal
		out.Signal = &sig
	case contract.ExitCode:
		code := e.Code
		out.Code = &code
	}
	return out
}

// IncarnationRecord is the checkpoint record of a worker's incarnation and
// its last exit.
type IncarnationRecord struct {
	ID        string      `json:"id,omitempty"`
	Source    string      `json:"src,omitempty"`
	PID       int64       `json:"pid,omitempty"`
	Started   int64       `json:"started,omitempty"`
	FirstSeen int64       `json:"first,omitempty"`
	Exit      *ExitRecord `json:"exit,omitempty"`
}

// ExitRecord is an Exit's checkpoint record.
type ExitRecord struct {
	At      int64  `json:"at"`
	How     string `json:"how"`
	Code    int    `json:"code,omitempty"`
	Signal  int    `json:"sig,omitempty"`
	Inc     string `json:"inc,omitempty"`
	Pending bool   `json:"pending,omitempty"`
}

// CheckpointIncarnation is the record of an incarnation and exit (nil when
// neither is known).
func CheckpointIncarnation(in Incarnation, e *Exit) *IncarnationRecord {
	if !in.Known() && e == nil {
		return nil
	}
	r := &IncarnationRecord{ID: in.ID, Source: in.Source.String(), PID: in.PID, Started: in.Started, FirstSeen: in.FirstSeen}
	if e != nil {
		r.Exit = &ExitRecord{At: e.At, How: e.How, Code: e.Code, Signal: e.Signal, Inc: e.Inc, Pending: e.Pending}
	}
	return r
}

// Restore is the incarnation and exit of a record (nil record: none). A
// pending exit counts its grace from the restore: the processor did not
// witness the time between.
func (r *IncarnationRecord) Restore(now int64) (Incarnation, *Exit) {
	if r == nil {
		return Incarnation{}, nil
	}
	src, _ := contract.ParseIncarnationSource(r.Source) // another name (never written): none
	in := Incarnation{ID: r.ID, Source: src, PID: r.PID, Started: r.Started, FirstSeen: r.FirstSeen}
	if r.Exit == nil {
		return in, nil
	}
	x := r.Exit
	return in, &Exit{At: x.At, Seen: now, How: x.How, Code: x.Code, Signal: x.Signal, Inc: x.Inc, Pending: x.Pending}
}
