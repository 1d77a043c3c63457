package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// MemRules is what the memory rule reads besides a worker's state: its
// config section, the configured role limits (sorted by role), and
// lost.after (a sample older than that says nothing at a run's start).
type MemRules struct {
	cfg        *MemoryRule
	roleLimits []roleLimit
	lostAfter  int64
	// roleNames interns process role names (role).
	roleNames map[string]string
}

// NewMemRules is the memory rule of one tracker: its section, and lost.after.
func NewMemRules(cfg *MemoryRule, lostAfter time.Duration) *MemRules {
	return &MemRules{cfg: cfg, roleLimits: roleLimits(cfg), lostAfter: int64(lostAfter), roleNames: map[string]string{}}
}

// Memory is a worker's memory: the tree's last sample, its cgroup limit,
// the tree's episode and each role's.
type Memory struct {
	rss       int64 // -1 = no sample yet
	rssAt     int64
	cgroupMax int64 // -1 = not reported
	// mem is the tree's episode, nil while there is none (under the soft
	// limit, no latch: most workers at most times), so that a worker does
	// not carry its 64 bytes for nothing (settle).
	mem   *memEpisode
	roles []roleMem
}

// NewMemory is the memory of a worker never sampled.
func NewMemory() Memory { return Memory{rss: -1, cgroupMax: -1} }

// RSS is the tree's last sample (-1 = none yet).
func (m *Memory) RSS() int64 { return m.rss }

// SetCgroupMax records the worker's cgroup memory limit as its tree reports it.
func (m *Memory) SetCgroupMax(v int64) { m.cgroupMax = v }

// memEpisode is one soft limit's episode: the whole tree's, or one role's
// (memory.roles). Two latches, because both conditions can hold at once and
// each is a reason of its own: memory persistently over the limit
// (memory.unhealthy_samples / unhealthy_after), and over it when a run
// started (memory.at_run_start). Only memory.recovery_samples samples under
// memory.recovery_ratio of the limit end the episode, so it cannot flap at
// the edge.
type memEpisode struct {
	overSince    int64
	persistSince int64
	atStartSince int64
	// The evidence each latch fired on: the memory then, the samples over
	// the limit (persist: persistSamples, below), and when it latched.
	persistValue int64
	persistAt    int64
	atStartValue int64
	// The sample counts in 32 bits and the bools after them: two words,
	// not four (it is kept per worker and per role). A count stops at
	// math.MaxInt32 (inc32).
	overSamples, underSamples, persistSamples int32
	over, persist, atStart                    bool
}

// idle reports whether the episode holds nothing a later sample reads: not
// over the limit and no latch. Its counts are then moot: going over starts
// overSamples afresh, and a latch starts underSamples afresh.
func (e *memEpisode) idle() bool { return !e.over && !e.persist && !e.atStart }

// episode is the tree's episode, made when a sample of rss against lim
// would start one (nil otherwise).
func (m *Memory) episode(rss, lim int64) *memEpisode {
	if m.mem == nil && lim > 0 && rss > lim {
		m.mem = &memEpisode{}
	}
	return m.mem
}

// settle lets an idle tree episode go.
func (m *Memory) settle() {
	if m.mem != nil && m.mem.idle() {
		m.mem = nil
	}
}

// sample advances the episode with one sample against the limit lim.
func (e *memEpisode) sample(rss, lim, now int64, m *MemoryRule) {
	if lim <= 0 {
		*e = memEpisode{}
		return
	}
	if rss > lim {
		if !e.over {
			e.overSince = now
		}
		e.over = true
		inc32(&e.overSamples)
		e.underSamples = 0
		if int(e.overSamples) >= m.UnhealthySamples {
			e.latchPersist(rss, now)
		}
		e.tick(rss, now, m)
		return
	}
	e.over = false
	e.overSamples = 0
	if float64(rss) < m.RecoveryRatio*float64(lim) {
		inc32(&e.underSamples)
		if int(e.underSamples) >= m.RecoverySamples {
			e.persist, e.atStart = false, false
		}
	} else {
		// Between the recovery threshold and the limit: neither over nor
		// recovered, the episode (if any) holds.
		e.underSamples = 0
	}
}

// tick applies the duration form of the rule, which also fires between
// samples.
func (e *memEpisode) tick(rss, now int64, m *MemoryRule) {
	if e.over && m.UnhealthyAfter > 0 && now-e.overSince >= int64(m.UnhealthyAfter) {
		e.latchPersist(rss, now)
	}
}

// latchPersist latches the persistent rule with its evidence: rss is the
// last sample over the limit (the episode is over when it latches).
func (e *memEpisode) latchPersist(rss, now int64) {
	if !e.persist {
		e.persist, e.persistSince = true, e.overSince
		e.persistValue, e.persistSamples, e.persistAt = rss, e.overSamples, now
		e.underSamples = 0
	}
}

// runStarted applies Scoot's rule: over the limit when a run starts.
func (e *memEpisode) runStarted(rss, lim, now int64) {
	if lim > 0 && rss > lim && !e.atStart {
		e.atStart, e.atStartSince, e.atStartValue = true, now, rss
		e.underSamples = 0
	}
}

// roleMem is one process role of a worker's tree: its memory at the last
// sample and, for a role with a soft limit (limit >= 0: its index in the
// rules' roleLimits), its episode (made on first use: most roles have
// none).
type roleMem struct {
	role  string
	rss   int64
	ep    *memEpisode
	limit int8
}

// roleLimit is one configured role soft limit.
type roleLimit struct {
	role  string
	bytes int64
}

// roleLimits are the configured role limits, sorted by role.
func roleLimits(cfg *MemoryRule) []roleLimit {
	out := make([]roleLimit, 0, len(cfg.Roles))
	for r, rule := range cfg.Roles {
		out = append(out, roleLimit{role: r, bytes: rule.SoftLimitBytes})
	}
	slices.SortFunc(out, func(a, b roleLimit) int { return strings.Compare(a.role, b.role) })
	return out
}

// SoftLimit is the effective soft limit of the tree in bytes (0 = none).
func (m *Memory) SoftLimit(r *MemRules) int64 {
	lim := r.cfg.SoftLimitBytes
	if r.cfg.SoftLimitRatio > 0 && m.cgroupMax > 0 {
		// At least 1 byte: 0 means "no limit", and a tiny cgroup limit
		// (1 byte: 0.9 of it truncates to 0) must not turn the rule off.
		r := max(1, int64(r.cfg.SoftLimitRatio*float64(m.cgroupMax)))
		if lim == 0 || r < lim {
			lim = r
		}
	}
	return lim
}

// Sample advances the tree's episode and each role's with a sample whose
// memory is known (s.Mem >= 0).
func (m *Memory) Sample(s *mapping.Sample, now int64, rules *MemRules) {
	rule := rules.cfg
	m.rss, m.rssAt = s.Mem, now
	lim := m.SoftLimit(rules)
	if e := m.episode(s.Mem, lim); e != nil {
		e.sample(s.Mem, lim, now, rule)
		m.settle()
	}
	if s.NRole == 0 {
		return
	}
	// The roles of this sample; a role missing from it has no process now.
	for i := range m.roles {
		m.roles[i].rss = 0
	}
	for _, v := range s.Roles[:s.NRole] {
		if r := rules.role(m, v.Role); r != nil {
			r.rss += v.RSS
		}
	}
	for i := range m.roles {
		r := &m.roles[i]
		if r.limit >= 0 {
			r.ep.sample(r.rss, rules.roleLimits[r.limit].bytes, now, rule)
		}
	}
}

// internRole returns the tracker's copy of a role name: workers share it
// (names are few; past maxInterned each worker keeps its own copy).
func (t *MemRules) internRole(name string) string {
	if s, ok := t.roleNames[name]; ok {
		return s
	}
	s := strings.Clone(name)
	if len(t.roleNames) < maxInterned {
		t.roleNames[s] = s
	}
	return s
}

const maxInterned = 256

// maxRoles bounds the roles kept per worker: a sender inventing role names
// cannot grow a worker's state.
const maxRoles = 16

// role returns the worker's entry for a role, adding it (sorted) when new;
// nil when the worker already has maxRoles roles.
func (t *MemRules) role(w *Memory, name string) *roleMem {
	i, found := slices.BinarySearchFunc(w.roles, name, func(r roleMem, n string) int { return strings.Compare(r.role, n) })
	if !found {
		if len(w.roles) >= maxRoles {
			return nil
		}
		rm := roleMem{role: t.internRole(name), limit: -1}
		if j, ok := slices.BinarySearchFunc(t.roleLimits, name, func(r roleLimit, n string) int { return strings.Compare(r.role, n) }); ok {
			rm.limit, rm.ep = int8(j), &memEpisode{}
		}
		w.roles = slices.Insert(w.roles, i, rm)
	}
	return &w.roles[i]
}

// RunStarted applies the at-run-start rule to the tree and to every
// limited role, with a recent sample only: an old one says nothing about now.
func (m *Memory) RunStarted(now int64, r *MemRules) {
	if !r.cfg.AtRunStart || m.rss < 0 || now-m.rssAt > r.lostAfter {
		return
	}
	lim := m.SoftLimit(r)
	if e := m.episode(m.rss, lim); e != nil {
		e.runStarted(m.rss, lim, now)
	}
	for i := range m.roles {
		if rm := &m.roles[i]; rm.limit >= 0 {
			rm.ep.runStarted(rm.rss, r.roleLimits[rm.limit].bytes, now)
		}
	}
}

// Tick applies the duration form of the rule to the tree's episode
// and every limited role's (it also fires between samples).
func (m *Memory) Tick(now int64, r *MemRules) {
	c := r.cfg
	if m.mem != nil {
		m.mem.tick(m.rss, now, c)
	}
	for i := range m.roles {
		if rm := &m.roles[i]; rm.limit >= 0 {
			rm.ep.tick(rm.rss, now, c)
		}
	}
}

// NewIncarnation starts the tree's episode and every role's afresh: a new
// process of the worker (docs/health-rules.md, "Incarnations") inherits no
// latch. The last samples stay (they are the new process's figures from
// its first sample on).
func (m *Memory) NewIncarnation() {
	m.mem = nil
	for i := range m.roles {
		if rm := &m.roles[i]; rm.ep != nil {
			*rm.ep = memEpisode{}
		}
	}
}

// AddReasons adds the reasons of the tree's episode and of every role's:
// unhealthy for each latch, degraded while over but not yet persistent.
func (m *Memory) AddReasons(r *MemRules, unhealthy, degraded []contract.Reason) ([]contract.Reason, []contract.Reason) {
	c := r.cfg
	add := func(e *memEpisode, rss, lim int64, role string) {
		if !e.persist && !e.atStart && !e.over {
			// No reason: build no text (this runs for every worker at
			// every evaluation).
			return
		}
		what := "memory"
		if role != "" {
			what = "memory of role " + role
		}
		cur := float64(rss)
		recovery := &contract.Recovery{Samples: int(e.underSamples), Needed: c.RecoverySamples, Ratio: c.RecoveryRatio}
		recovers := fmt.Sprintf("; recovers after %d samples under %.0f%% of it", c.RecoverySamples, 100*c.RecoveryRatio)
		if e.persist {
			unhealthy = append(unhealthy, contract.Reason{
				Code:    CodeMemory,
				Message: fmt.Sprintf("%s over the soft limit for %d samples or %v", what, c.UnhealthySamples, c.UnhealthyAfter) + recovers,
				Value:   float64(e.persistValue), Threshold: float64(lim), Since: Time(e.persistSince), Role: role,
				Samples: int(e.persistSamples), FiredAt: Time(e.persistAt),
				Latched: true, Current: &cur, Recovery: recovery,
			})
		}
		if e.atStart {
			unhealthy = append(unhealthy, contract.Reason{
				Code:    CodeMemoryAtStart,
				Message: what + " over the soft limit when a run started" + recovers,
				Value:   float64(e.atStartValue), Threshold: float64(lim), Since: Time(e.atStartSince), Role: role,
				FiredAt: Time(e.atStartSince), Latched: true, Current: &cur, Recovery: recovery,
			})
		}
		if e.over && !e.persist {
			// Over now: the value now is on the firing side.
			degraded = append(degraded, contract.Reason{
				Code:    CodeMemory,
				Message: fmt.Sprintf("%s over the soft limit for %d of %d samples", what, e.overSamples, c.UnhealthySamples),
				Value:   cur, Threshold: float64(lim), Since: Time(e.overSince), Role: role,
				Samples: int(e.overSamples),
			})
		}
	}
	if m.mem != nil {
		add(m.mem, m.rss, m.SoftLimit(r), "")
	}
	for i := range m.roles {
		if rm := &m.roles[i]; rm.limit >= 0 {
			add(rm.ep, rm.rss, r.roleLimits[rm.limit].bytes, rm.role)
		}
	}
	return unhealthy, degraded
}

// Snapshot is the snapshot's view of the worker's memory, its roles
// written into roles (RoleCount() of them: the processor hands every
// worker's out of one block of its snapshot's own, tracker.block; with
// fewer, the list gets memory of its own).
func (m *Memory) Snapshot(r *MemRules, roles []contract.RoleMemory) contract.Memory {
	mem := contract.Memory{
		RSSBytes: max(m.rss, 0), SoftLimitBytes: m.SoftLimit(r),
		CgroupMaxBytes: max(m.cgroupMax, 0),
		SampledAt:      contract.Time(m.rssAt),
	}
	if m.mem != nil {
		mem.OverSamples = int(m.mem.overSamples)
	}
	if roles == nil || len(roles) < len(m.roles) { // nil: [] all the same in the JSON
		roles = make([]contract.RoleMemory, len(m.roles))
	}
	mem.Roles = roles[:len(m.roles):len(m.roles)]
	for i := range m.roles {
		mem.Roles[i] = m.roleSnapshot(i, r)
	}
	return mem
}

// RoleCount is how many roles Snapshot lists.
func (m *Memory) RoleCount() int { return len(m.roles) }

// roleSnapshot is the snapshot's view of the worker's i-th role.
func (m *Memory) roleSnapshot(i int, r *MemRules) contract.RoleMemory {
	role := &m.roles[i]
	rm := contract.RoleMemory{Role: role.role, RSSBytes: role.rss}
	if role.limit >= 0 {
		rm.SoftLimitBytes, rm.OverSamples = r.roleLimits[role.limit].bytes, int(role.ep.overSamples)
	}
	return rm
}

// MemoryRecord is the memory's checkpoint record.
type MemoryRecord struct {
	RSS       int64     `json:"rss"`
	CgroupMax int64     `json:"cgmax"`
	Mem       cpEpisode `json:"mem"`
	Roles     []cpRole  `json:"roles,omitempty"`
}

// cpEpisode is a memEpisode.
type cpEpisode struct {
	Over         bool  `json:"over,omitempty"`
	OverSamples  int   `json:"n,omitempty"`
	UnderSamples int   `json:"u,omitempty"`
	OverSince    int64 `json:"since,omitempty"`
	Persist      bool  `json:"persist,omitempty"`
	PersistSince int64 `json:"persist_since,omitempty"`
	AtStart      bool  `json:"at_start,omitempty"`
	AtStartSince int64 `json:"at_start_since,omitempty"`
	// The latches' evidence (memEpisode).
	PersistValue   int64 `json:"persist_value,omitempty"`
	PersistSamples int   `json:"persist_n,omitempty"`
	PersistAt      int64 `json:"persist_at,omitempty"`
	AtStartValue   int64 `json:"at_start_value,omitempty"`
}

func (e *memEpisode) cp() cpEpisode {
	return cpEpisode{
		e.over, int(e.overSamples), int(e.underSamples), e.overSince, e.persist, e.persistSince, e.atStart, e.atStartSince,
		e.persistValue, int(e.persistSamples), e.persistAt, e.atStartValue,
	}
}

func (c cpEpisode) episode() memEpisode {
	return memEpisode{
		over: c.Over, overSamples: Clamp32(c.OverSamples), underSamples: Clamp32(c.UnderSamples), overSince: c.OverSince,
		persist: c.Persist, persistSince: c.PersistSince, atStart: c.AtStart, atStartSince: c.AtStartSince,
		persistValue: c.PersistValue, persistSamples: Clamp32(c.PersistSamples), persistAt: c.PersistAt, atStartValue: c.AtStartValue,
	}
}

// cpRole is a role's last memory and, for a limited role, its episode.
type cpRole struct {
	Role string    `json:"role"`
	RSS  int64     `json:"rss"`
	Mem  cpEpisode `json:"mem"`
}

// Checkpoint is the memory's checkpoint record.
func (m *Memory) Checkpoint() MemoryRecord {
	c := MemoryRecord{RSS: m.rss, CgroupMax: m.cgroupMax}
	if m.mem != nil {
		c.Mem = m.mem.cp()
	}
	for _, r := range m.roles {
		cr := cpRole{Role: r.role, RSS: r.rss}
		if r.ep != nil {
			cr.Mem = r.ep.cp()
		}
		c.Roles = append(c.Roles, cr)
	}
	return c
}

// Restore takes a checkpointed memory back; its roles are the rules'
// (interned names, the configured limits).
func (m *Memory) Restore(c *MemoryRecord, t *MemRules) {
	m.rss, m.cgroupMax, m.mem = c.RSS, c.CgroupMax, nil
	if e := c.Mem.episode(); !e.idle() {
		m.mem = &e
	}
	for _, r := range c.Roles {
		if rm := t.role(m, r.Role); rm != nil {
			rm.rss = r.RSS
			if rm.ep != nil {
				*rm.ep = r.Mem.episode()
			}
		}
	}
}
