package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"fmt"
	"slices"
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// Kills blame the right party (docs/health-rules.md, "Kills"). Every kill is
// counted by reason (workerwatch.worker.kills); only reasons whose effect is
// not "none" feed the kills rule: kills.count of them within kills.window
// make the worker degraded or unhealthy. A run killed by its own limit
// (timeout, memory_limit) is the limit doing its job: by default it does not
// count. The worker's own processes dying does: the OOM killer (the tree's
// cgroup oom_kills), runs' processes crashing, the main process exiting,
// child processes exiting with no run ending to blame.

// Effects of a kill reason, in order of severity.
const (
	EffectNone uint8 = iota
	EffectDegraded
	EffectUnhealthy
)

// EffectNames are the effects' names, in that order.
var EffectNames = [...]string{"none", "degraded", "unhealthy"}

// EffectIndex is an effect's index in EffectNames; false for no effect.
func EffectIndex(e string) (uint8, bool) {
	i := slices.Index(EffectNames[:], e)
	return uint8(i), i >= 0
}

// DefaultKillEffects is every reason's default effect.
func DefaultKillEffects() map[string]string {
	m := make(map[string]string, len(KillReasonNames))
	for _, r := range KillReasonNames {
		m[r] = EffectNames[EffectNone]
	}
	for _, r := range []string{contract.KillOOM, contract.KillCrash, contract.KillWorkerExit, contract.KillChildExit} {
		m[r] = EffectNames[EffectUnhealthy]
	}
	return m
}

// The kill reason index: fixed so per-worker kill counters are an array. The
// reasons of the contract, "other" last for anything else, so a misbehaving
// worker cannot explode the kills metric's cardinality.
var KillReasonNames = contract.KillReasons

const (
	NKillReasons = len(KillReasonNames)
	killOther    = NKillReasons - 1
)

var killReasonIndex = func() map[string]int {
	m := make(map[string]int, NKillReasons)
	for i, r := range KillReasonNames {
		m[r] = i
	}
	return m
}()

// KillIndex is a kill reason's index in KillReasonNames (other for any
// reason not there).
func KillIndex(reason string) int {
	if i, ok := killReasonIndex[reason]; ok {
		return i
	}
	return killOther
}

// Kills is a worker's kills: the tree's cumulative counters' last values
// (-1 = none yet), run ends not yet matched against child exits, the last
// tree sample, and the counted kills, child exits and cumulative kills by
// reason (book).
type Kills struct {
	oomBase, exitMainBase, exitChildBase int64
	endTimes                             []int64 // in arrival order, 0 = spent
	treeAt                               int64
	// book: nil while there is nothing in it (most workers: no kill ever
	// and no child exit waiting; one pointer for all of it keeps the
	// worker 56 bytes smaller than the book inline beside a pointer to the
	// counts, and the tracker's Worker in the 576-byte size class).
	book *killBook
}

// killBook is the counted kills within kills.window, the episode's start,
// the child exits not yet matched against run ends, and the cumulative
// kills by reason (nil until the first: a worker that had a kill keeps its
// book for its counts).
type killBook struct {
	killLog   []killRec
	killSince int64
	exitPend  []exitRec
	kills     *[NKillReasons]int64
}

// bk is the book, made on first use.
func (k *Kills) bk() *killBook {
	if k.book == nil {
		k.book = &killBook{}
	}
	return k.book
}

// tidy drops the book once it holds nothing.
func (k *Kills) tidy() {
	if b := k.book; b != nil && len(b.killLog) == 0 && b.killSince == 0 && len(b.exitPend) == 0 && b.kills == nil {
		k.book = nil
	}
}

// pending are the child exits waiting to be matched.
func (k *Kills) pending() []exitRec {
	if k.book == nil {
		return nil
	}
	return k.book.exitPend
}

// noKills is what ByReason reads for a worker without kills (never
// written).
var noKills [NKillReasons]int64

// count adds n kills of reason idx.
func (k *Kills) count(idx int, n int64) {
	b := k.bk()
	if b.kills == nil {
		b.kills = new([NKillReasons]int64)
	}
	b.kills[idx] += n
}

// killRec is one counted kill: when it arrived and its reason's index.
type killRec struct {
	at     int64
	reason uint8
}

// maxKillLog bounds the counted kills kept per worker (those within
// kills.window); beyond it the oldest go and the rule's value is a floor.
const maxKillLog = 1024

// NewKills are the kills of a worker never seen (no tree counters yet).
func NewKills() Kills { return Kills{oomBase: -1, exitMainBase: -1, exitChildBase: -1} }

// KillRules is what the kills rule reads: its section and each reason's
// effect (the defaults overridden by kills.effects).
type KillRules struct {
	cfg     *KillsRule
	effects [NKillReasons]uint8
}

// NewKillRules is the kills rule of one tracker.
func NewKillRules(cfg *KillsRule) *KillRules {
	r := &KillRules{cfg: cfg}
	effects := DefaultKillEffects()
	for reason, e := range cfg.Effects {
		effects[reason] = e
	}
	for reason, e := range effects {
		if i, ok := killReasonIndex[reason]; ok {
			r.effects[i], _ = EffectIndex(e)
		}
	}
	return r
}

// Kill counts one kill of reason idx (KillIndex); a reason with an effect
// is remembered for the rule.
func (k *Kills) Kill(idx int, now int64, r *KillRules) {
	k.count(idx, 1)
	if r.cfg.Count <= 0 || r.effects[idx] == EffectNone {
		return
	}
	b := k.bk()
	if len(b.killLog) >= maxKillLog {
		b.killLog = append(b.killLog[:0], b.killLog[1:]...)
	}
	b.killLog = append(b.killLog, killRec{at: now, reason: uint8(idx)})
}

// ByReason are the cumulative kills by reason index (KillReasonNames),
// read-only.
func (k *Kills) ByReason() *[NKillReasons]int64 {
	if k.book == nil || k.book.kills == nil {
		return &noKills
	}
	return k.book.kills
}

// Window advances the kills rule to now: the kills that slid out of
// kills.window are forgotten, and since when the episode runs (the oldest
// kill in the window when the rule began to fire, fixed until it stops
// firing) is kept for Reason.
func (k *Kills) Window(now int64, r *KillRules) {
	b := k.book
	if b == nil {
		return
	}
	if r.cfg.Count <= 0 || len(b.killLog) == 0 {
		b.killSince = 0
		k.tidy()
		return
	}
	win := int64(r.cfg.Window)
	i := 0
	for i < len(b.killLog) && now-b.killLog[i].at > win {
		i++
	}
	if i > 0 {
		b.killLog = append(b.killLog[:0], b.killLog[i:]...)
	}
	if len(b.killLog) == 0 {
		b.killLog, b.killSince = nil, 0
		k.tidy()
		return
	}
	effect, _, oldest := k.tally(r)
	switch {
	case effect == EffectNone:
		b.killSince = 0
	case b.killSince == 0:
		b.killSince = oldest
	}
}

// tally is the rule's effect on the kills in the log, their count and the
// oldest of them: unhealthy with kills.count kills whose reason is
// unhealthy, degraded with kills.count of any that count.
func (k *Kills) tally(r *KillRules) (effect uint8, n int, oldest int64) {
	count := r.cfg.Count
	if count <= 0 || k.book == nil || len(k.book.killLog) == 0 {
		return EffectNone, 0, 0
	}
	log := k.book.killLog
	nUnhealthy := 0
	var oldestUnhealthy int64
	for _, kr := range log {
		if r.effects[kr.reason] == EffectUnhealthy {
			if nUnhealthy == 0 {
				oldestUnhealthy = kr.at
			}
			nUnhealthy++
		}
	}
	switch {
	case nUnhealthy >= count:
		return EffectUnhealthy, nUnhealthy, oldestUnhealthy
	case len(log) >= count:
		return EffectDegraded, len(log), log[0].at
	}
	return EffectNone, 0, 0
}

// Reason is the kills rule's reason and effect as Window left the log: the
// real count of counted kills within the window, by reason.
func (k *Kills) Reason(r *KillRules) (contract.Reason, uint8) {
	effect, n, _ := k.tally(r)
	if effect == EffectNone {
		return contract.Reason{}, EffectNone
	}
	// An effect: the book holds the kills.
	var byReason [NKillReasons]int
	for _, kr := range k.book.killLog {
		byReason[kr.reason]++
	}
	var parts []string
	for i, c := range byReason {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", KillReasonNames[i], c))
		}
	}
	return contract.Reason{
		Code:    CodeKills,
		Message: fmt.Sprintf("%d kills that count within %v (%s)", n, r.cfg.Window, strings.Join(parts, ", ")),
		Value:   float64(n), Threshold: float64(r.cfg.Count), Since: Time(k.book.killSince), Samples: n,
	}, effect
}

// NewIncarnation starts the kills window afresh for a new process of the
// worker: the kills of its runs and children belong to the process they
// happened in. The main process's own exits (worker_exit) stay: they are
// how one incarnation ended and the next began, and a crash loop is
// nothing but such restarts. The counts by reason stay too (cumulative).
// The tree's exit counters keep their baselines.
func (k *Kills) NewIncarnation() {
	k.endTimes = nil
	b := k.book
	if b == nil {
		return
	}
	exitIdx := uint8(killReasonIndex[contract.KillWorkerExit])
	b.killLog = slices.DeleteFunc(b.killLog, func(kr killRec) bool { return kr.reason != exitIdx })
	if len(b.killLog) == 0 {
		b.killLog = nil
	}
	b.killSince = 0
	b.exitPend = nil
	k.tidy()
}

// Tree reads the kills the process tree shows: the cgroup's OOM kills,
// the main process exiting, child processes exiting. Cumulative counters:
// the first value is a baseline, a value lower than the last (the receiver
// restarted) a new one.
func (k *Kills) Tree(s *mapping.Sample, now int64, r *KillRules) {
	delta := func(v int64, base *int64) int64 {
		if v < 0 {
			return 0
		}
		d := int64(0)
		if *base >= 0 && v > *base {
			d = v - *base
		}
		*base = v
		return d
	}
	for n := delta(s.OOMKills, &k.oomBase); n > 0; n-- {
		k.Kill(killReasonIndex[contract.KillOOM], now, r)
	}
	mainExits := delta(s.ExitMain, &k.exitMainBase)
	for n := mainExits; n > 0; n-- {
		k.Kill(killReasonIndex[contract.KillWorkerExit], now, r)
	}
	childExits := delta(s.ExitChild, &k.exitChildBase)
	if mainExits > 0 {
		// Children die with their root, in the same scrape or just before
		// it (a worker stopping closes its pool first): the worker's exit
		// explains them, not N more kills.
		childExits = 0
		if k.book != nil {
			k.book.exitPend = nil
			k.tidy()
		}
	}
	if childExits > 0 {
		b := k.bk()
		if len(b.exitPend) >= maxPending {
			b.exitPend = b.exitPend[1:]
		}
		b.exitPend = append(b.exitPend, exitRec{at: now, after: k.treeAt, n: int32(min(childExits, 1<<20))})
	}
	if s.Tree {
		k.treeAt = now
	}
}

// exitRec is child exits one tree sample saw, not yet matched against the
// runs that ended: they happened after the previous sample (after) and by
// this one (at).
type exitRec struct {
	at, after int64
	n         int32
}

// maxPending bounds the child exits waiting to be matched per worker.
const maxPending = 256

// maxEnds bounds the run ends a worker keeps for matching; beyond it the
// oldest go. MatchExits drops those no exit can match any more, so a worker
// keeps only the ends of about two exit windows, whatever its rate (a fixed
// ring of 64 lost ends a worker ending 4 runs a second still needed, and
// their exits counted as child_exit).
const maxEnds = 1024

// RunEnded remembers that a started run of the worker ended (its child, if
// any, exits too): a child exit around it is to blame on the run. Only for
// workers whose tree reports exits: nothing else needs it. In arrival order.
func (k *Kills) RunEnded(now int64) {
	if k.exitChildBase < 0 {
		return
	}
	if len(k.endTimes) >= maxEnds {
		k.endTimes = slices.Delete(k.endTimes, 0, 1)
	}
	k.endTimes = append(k.endTimes, now)
}

// MatchExits blames the child exits older than kills.exit_window (a main
// exit within it explains them: Tree drops them) on runs
// that ended from the sample before them until kills.exit_window after them
// (the run's end event and the tree sample travel apart: seconds apart on a
// loaded host); the rest are child deaths with no run to blame (child_exit). A run end explains one exit,
// and only one close to it in time, so runs whose children live on
// (OpenFn's engine keeps its child processes) do not excuse later deaths.
// explained (nil = none) is told the time of each exit a run end explained.
func (k *Kills) MatchExits(now int64, r *KillRules, explained func(at int64)) {
	grace := int64(r.cfg.ExitWindow)
	done := 0
	pend := k.pending()
	for _, ex := range pend {
		if now-ex.at < grace {
			break
		}
		done++
		from := ex.after
		if from == 0 {
			from = ex.at - grace
		}
		n := int(ex.n)
		// The oldest ends first: exits are matched oldest first too.
		for i := range k.endTimes {
			if n == 0 {
				break
			}
			// A matched end is spent (0).
			if e := k.endTimes[i]; e > 0 && e > from-grace && e <= ex.at+grace {
				k.endTimes[i] = 0
				n--
				if explained != nil {
					explained(ex.at)
				}
			}
		}
		for ; n > 0; n-- {
			k.Kill(killReasonIndex[contract.KillChildExit], ex.at, r)
		}
	}
	if b := k.book; b != nil {
		if done > 0 {
			b.exitPend = slices.Delete(b.exitPend, 0, done)
		}
		if len(b.exitPend) == 0 {
			b.exitPend = nil
		}
		k.tidy()
	}
	k.dropSpentEnds(now, grace)
}

// dropSpentEnds forgets the run ends no child exit can match any more: the
// spent ones, and those before every window still to come (an exit waiting
// matches ends after its previous tree sample - exit_window, a later exit
// ends after the last tree sample - exit_window).
func (k *Kills) dropSpentEnds(now, grace int64) {
	from := now
	if k.treeAt > 0 {
		from = k.treeAt
	}
	for _, ex := range k.pending() {
		if ex.after > 0 {
			from = min(from, ex.after)
		} else {
			from = min(from, ex.at-grace)
		}
	}
	k.endTimes = slices.DeleteFunc(k.endTimes, func(e int64) bool { return e == 0 || e <= from-grace })
	if len(k.endTimes) == 0 {
		k.endTimes = nil
	}
}

// Snapshot is the kills by reason, reasons with none left out; nil when
// there are none (most workers: a map each would be kept in every
// snapshot; the extension answers {} for it).
func (k *Kills) Snapshot() map[string]int64 {
	var m map[string]int64
	for i, n := range k.ByReason() {
		if n > 0 {
			if m == nil {
				m = map[string]int64{}
			}
			m[KillReasonNames[i]] = n
		}
	}
	return m
}

// KillsRecord is the kills' checkpoint record: counted kills by reason name
// (indexes may change between versions).
type KillsRecord struct {
	KillLog   []killRecJSON    `json:"kill_log,omitempty"`
	KillSince int64            `json:"kill_since,omitempty"`
	Kills     map[string]int64 `json:"kills,omitempty"`
}

type killRecJSON struct {
	At     int64  `json:"at"`
	Reason string `json:"reason"`
}

// Checkpoint is the kills' checkpoint record.
func (k *Kills) Checkpoint() KillsRecord {
	c := KillsRecord{Kills: k.Snapshot()}
	if b := k.book; b != nil {
		c.KillSince = b.killSince
		for _, r := range b.killLog {
			c.KillLog = append(c.KillLog, killRecJSON{At: r.at, Reason: KillReasonNames[r.reason]})
		}
	}
	return c
}

// Restore takes checkpointed kills back; only those of reasons that count
// now (the rules' effects) go back into the rule's log.
func (k *Kills) Restore(c *KillsRecord, rules *KillRules) {
	effects := &rules.effects
	b := k.bk()
	for _, r := range c.KillLog {
		if i, ok := killReasonIndex[r.Reason]; ok && effects[i] != EffectNone && len(b.killLog) < maxKillLog {
			b.killLog = append(b.killLog, killRec{at: r.At, reason: uint8(i)})
		}
	}
	b.killSince = c.KillSince
	k.tidy()
	for r, n := range c.Kills {
		if n != 0 {
			k.count(KillIndex(r), n)
		}
	}
}
