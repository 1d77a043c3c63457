package history

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
)

// The history survives a restart when history.storage_id names a storage
// extension (file_storage in the default config). Through the collector's
// storage API (a key-value client, no listing), it is written incrementally:
// every historyFlushInterval (and at shutdown) only the groups of
// historyGroup samples that changed, so a minute at 10 s and 10,000 workers
// writes about 10,000 x 1.5 groups of 0.5 KiB instead of every ring (115 MB).
//
// Keys (the client is this extension's own, so nothing else writes here):
//
//	meta             JSON: format version, ring size, resolution, group size
//	ids              every worker id with a history in storage
//	w/<id>           the ring's length and write position, last state, roles
//	t/<id>           the transitions
//	s/<g:2 bytes><id> samples g*historyGroup .. of the ring, 64 bytes each
//
// A value that does not decode is skipped with one warning naming the key;
// a history that cannot be read never stops the collector.

const (
	historyStorageVersion = 1
	historyGroup          = 8
	historyFlushInterval  = time.Minute
	// historyLoadChunk is how many workers' keys one storage batch reads.
	historyLoadChunk = 256
	keyHistoryMeta   = "meta"
	keyHistoryIDs    = "ids"
	sampleBytes      = 64
)

type historyMetaDoc struct {
	Version      int   `json:"version"`
	Size         int   `json:"size"`
	ResolutionMS int64 `json:"resolution_ms"`
	Group        int   `json:"group"`
}

// historyPersistence is the storage side of a historyStore. Its fields are
// guarded by the store's mu, except client, which is set before use.
type historyPersistence struct {
	client storage.Client
	logger *zap.Logger
	// ids is every id with keys in storage, with the groups it wrote.
	ids      map[string]int
	idsDirty bool
	// removed is ids whose keys must go: the worker left the history.
	removed map[string]int
	// rewrite asks the next flush to write every ring whole: after a failed
	// write, or when the stored rings had another shape.
	rewrite bool

	stop    chan struct{}
	stopped sync.WaitGroup
}

func headerKey(id string) string { return "w/" + id }
func transKey(id string) string  { return "t/" + id }
func groupKey(g int, id string) string {
	return "s/" + string([]byte{byte(g >> 8), byte(g)}) + id
}

// OpenStorage opens the client of the storage extension named by id.
func OpenStorage(ctx context.Context, host component.Host, id component.ID, owner component.ID, logger *zap.Logger) (storage.Client, error) {
	ext, ok := host.GetExtensions()[id]
	if !ok {
		return nil, fmt.Errorf("history::storage_id: extension %q not found; add it to service::extensions", id)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return nil, fmt.Errorf("history::storage_id: extension %q is not a storage extension", id)
	}
	c, err := se.GetClient(ctx, component.KindExtension, owner, "history")
	if err != nil {
		return nil, fmt.Errorf("history::storage_id: %w", err)
	}
	logger.Info("worker history kept in storage", zap.String("storage", id.String()))
	return c, nil
}

// Attach loads what storage holds into hs and starts the periodic flush.
func (hs *Store) Attach(ctx context.Context, client storage.Client, logger *zap.Logger) {
	p := &historyPersistence{client: client, logger: logger, ids: map[string]int{}, removed: map[string]int{}, stop: make(chan struct{})}
	hs.load(ctx, p)
	hs.mu.Lock()
	hs.persist = p
	hs.mu.Unlock()
	// Writes outlive Start's context; they stop with detach.
	bg := context.WithoutCancel(ctx)
	p.stopped.Add(1)
	go func() {
		defer p.stopped.Done()
		t := time.NewTicker(historyFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				hs.save(bg)
			}
		}
	}()
}

// Detach stops the periodic flush, writes what is left and closes the
// client. After it the history is in memory only.
func (hs *Store) Detach(ctx context.Context) error {
	hs.mu.Lock()
	p := hs.persist
	hs.mu.Unlock()
	if p == nil {
		return nil
	}
	close(p.stop)
	p.stopped.Wait()
	hs.save(ctx)
	hs.mu.Lock()
	hs.persist = nil
	hs.mu.Unlock()
	return p.client.Close(ctx)
}

// save writes what changed since the last save in one storage batch. The
// changes are collected under the lock; the write happens outside it.
func (hs *Store) save(ctx context.Context) {
	hs.mu.Lock()
	p := hs.persist
	if p == nil {
		hs.mu.Unlock()
		return
	}
	ops := hs.collect(p)
	hs.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	if err := p.client.Batch(ctx, ops...); err != nil {
		p.logger.Warn("cannot write the worker history to storage; the next write tries again with every ring", zap.Error(err))
		hs.mu.Lock()
		p.rewrite, p.idsDirty = true, true
		hs.mu.Unlock()
	}
}

// collect turns the changes since the last save into storage operations
// and marks them saved. Called with hs.mu held.
func (hs *Store) collect(p *historyPersistence) []*storage.Operation {
	var ops []*storage.Operation
	groups := map[int]bool{}
	for id, h := range hs.byID {
		if p.rewrite {
			h.unsaved, h.transDirty = h.n, true
		}
		if h.unsaved > 0 {
			clear(groups)
			for i := range min(h.unsaved, h.n) {
				groups[h.slotBack(i, hs.size)/historyGroup] = true
			}
			for _, g := range slices.Sorted(maps.Keys(groups)) {
				ops = append(ops, storage.SetOperation(groupKey(g, id), h.encodeGroup(g)))
			}
			ops = append(ops, storage.SetOperation(headerKey(id), h.encodeHeader()))
			h.unsaved = 0
		}
		if h.transDirty {
			ops = append(ops, storage.SetOperation(transKey(id), h.encodeTransitions()))
			h.transDirty = false
		}
		used := (h.n + historyGroup - 1) / historyGroup
		if prev, ok := p.ids[id]; !ok || prev != used {
			p.ids[id], p.idsDirty = used, true
		}
		h.persisted = true
	}
	for id, used := range p.removed {
		ops = append(ops, storage.DeleteOperation(headerKey(id)), storage.DeleteOperation(transKey(id)))
		for g := range used {
			ops = append(ops, storage.DeleteOperation(groupKey(g, id)))
		}
		if _, ok := p.ids[id]; ok && hs.byID[id] == nil {
			delete(p.ids, id)
			p.idsDirty = true
		}
	}
	clear(p.removed)
	if p.rewrite {
		meta, _ := json.Marshal(historyMetaDoc{Version: historyStorageVersion, Size: hs.size, ResolutionMS: hs.resolution.Milliseconds(), Group: historyGroup})
		ops = append(ops, storage.SetOperation(keyHistoryMeta, meta))
		p.rewrite = false
	}
	if p.idsDirty {
		ops = append(ops, storage.SetOperation(keyHistoryIDs, encodeIDs(p.ids)))
		p.idsDirty = false
	}
	return ops
}

// stored is one worker's keys as read.
type stored struct {
	header, trans []byte
	groups        [][]byte
}

// load reads every stored history into hs. Workers already in hs (published
// before Start) keep what they have.
func (hs *Store) load(ctx context.Context, p *historyPersistence) {
	warn := func(key string, err error) {
		p.logger.Warn("cannot read the worker history from storage; that part starts empty", zap.String("key", key), zap.Error(err))
	}
	metaRaw, err := p.client.Get(ctx, keyHistoryMeta)
	if err != nil {
		warn(keyHistoryMeta, err)
		p.rewrite = true
		return
	}
	p.rewrite = true // a new store, or one of another shape: write it whole
	if metaRaw == nil {
		return
	}
	var meta historyMetaDoc
	if err := json.Unmarshal(metaRaw, &meta); err != nil || meta.Version != historyStorageVersion || meta.Group != historyGroup || meta.Size <= 0 {
		warn(keyHistoryMeta, cmp.Or(err, fmt.Errorf("unsupported history format %+v", meta)))
		return
	}
	idsRaw, err := p.client.Get(ctx, keyHistoryIDs)
	if err != nil || idsRaw == nil {
		if err != nil {
			warn(keyHistoryIDs, err)
		}
		return
	}
	ids, err := decodeIDs(idsRaw)
	if err != nil {
		warn(keyHistoryIDs, err)
		return
	}
	sameShape := meta.Size == hs.size && meta.ResolutionMS == hs.resolution.Milliseconds()
	p.rewrite = !sameShape
	oldGroups := (meta.Size + historyGroup - 1) / historyGroup
	loaded := 0
	for chunk := range slices.Chunk(ids, historyLoadChunk) {
		var ops []*storage.Operation
		for _, id := range chunk {
			ops = append(ops, storage.GetOperation(headerKey(id)), storage.GetOperation(transKey(id)))
			for g := range oldGroups {
				ops = append(ops, storage.GetOperation(groupKey(g, id)))
			}
		}
		if err := p.client.Batch(ctx, ops...); err != nil {
			warn(headerKey(chunk[0]), err)
			p.rewrite = true
			return
		}
		hs.mu.Lock()
		for i, id := range chunk {
			o := ops[i*(2+oldGroups):]
			st := stored{header: o[0].Value, trans: o[1].Value}
			for g := range oldGroups {
				st.groups = append(st.groups, o[2+g].Value)
			}
			p.ids[id] = oldGroups // every key of it is deleted if it goes
			if hs.byID[id] != nil || st.header == nil {
				continue
			}
			h, err := hs.restore(st, sameShape)
			if err != nil {
				warn(headerKey(id), err)
				continue
			}
			hs.byID[id] = h
			for _, smp := range h.slots {
				if hs.first == 0 || smp.At < hs.first {
					hs.first = smp.At
				}
			}
			loaded++
		}
		hs.mu.Unlock()
	}
	p.logger.Info("worker history read from storage", zap.Int("workers", loaded))
}

// restore rebuilds one worker's rings. With the ring of the same shape the
// slots are put back as they were (so only new groups are written later);
// otherwise the samples are replayed oldest first into the new ring.
func (hs *Store) restore(st stored, sameShape bool) (*workerHistory, error) {
	h := &workerHistory{persisted: true}
	r := reader{b: st.header}
	r.version()
	n, next := int(r.u16()), int(r.u16())
	h.state = r.byte()
	for i := range Roles {
		h.roles[i] = r.str()
	}
	if r.err != nil {
		return nil, r.err
	}
	// Each group's samples, by group; a group that is missing or short
	// breaks the slot layout, so the samples are then replayed instead.
	var all []Sample
	aligned := sameShape && n <= hs.size && (n < hs.size && next == 0 || n == hs.size && next < hs.size)
	for g, gb := range st.groups {
		want := min(historyGroup, max(n-g*historyGroup, 0))
		if gb == nil {
			aligned = aligned && want == 0
			continue
		}
		gr := reader{b: gb}
		gr.version()
		k := int(gr.byte())
		for range k {
			all = append(all, readSample(gr.take(sampleBytes)))
		}
		if gr.err != nil {
			return nil, gr.err
		}
		aligned = aligned && k == want
	}
	if aligned {
		for slot, s := range all[:n] {
			h.setSample(slot, s, hs.size)
		}
		h.next = next
	} else {
		slices.SortFunc(all, func(a, b Sample) int { return cmp.Compare(a.At, b.At) })
		for _, s := range all {
			if s.At > 0 {
				h.add(s, hs.resolution.Milliseconds(), hs.size)
			}
		}
		h.unsaved = h.n
	}
	if st.trans != nil {
		tr := reader{b: st.trans}
		tr.version()
		k, tnext := int(tr.byte()), int(tr.byte())
		for range k {
			t := Transition{At: int64(tr.u64()), From: tr.byte(), To: tr.byte(), NReasons: min(tr.byte(), TransitionReasons)}
			for j := range t.NReasons {
				t.Reasons[j] = TransitionReason{Code: hs.intern(tr.str()), Value: tr.f64(), Threshold: tr.f64()}
			}
			h.trans = append(h.trans, t)
		}
		if tr.err != nil || k > Transitions || (k > 0 && tnext >= k) {
			return nil, cmp.Or(tr.err, fmt.Errorf("%d transitions, next %d", k, tnext))
		}
		h.tnext = tnext
	}
	return h, nil
}
