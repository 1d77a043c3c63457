package workerhealthprocessor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// memStorage is an in-memory storage extension that survives "restarts"
// of the processor within a test, like file_storage survives the process.
// It counts the values written per key; block, when set, holds every Batch
// until it is closed (a slow disk).
type memStorage struct {
	mu     sync.Mutex
	data   map[string][]byte
	writes map[string]int
	block  chan struct{}
	fail   error
	// sets counts the batches that set a value; failSet, when positive,
	// fails the batch that would be that one (a disk that fills up
	// during a checkpoint).
	sets, failSet int
}

type memClient struct{ s *memStorage }

// subscriber records published snapshots.
type subscriber struct {
	mu    sync.Mutex
	snaps []*contract.Snapshot
}

type host struct {
	ext map[component.ID]component.Component
}

func (s *memStorage) Start(context.Context, component.Host) error { return nil }

func (s *memStorage) Shutdown(context.Context) error { return nil }

func (s *memStorage) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return &memClient{s: s}, nil
}

// written returns and resets the count of values written per key.
func (s *memStorage) written() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.writes
	s.writes = nil
	return w
}

func (s *memStorage) keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

func (c *memClient) Get(ctx context.Context, k string) ([]byte, error) {
	op := storage.GetOperation(k)
	err := c.Batch(ctx, op)
	return op.Value, err
}

func (c *memClient) Set(ctx context.Context, k string, v []byte) error {
	return c.Batch(ctx, storage.SetOperation(k, v))
}

func (c *memClient) Delete(ctx context.Context, k string) error {
	return c.Batch(ctx, storage.DeleteOperation(k))
}

func (c *memClient) Batch(_ context.Context, ops ...*storage.Operation) error {
	c.s.mu.Lock()
	block, fail := c.s.block, c.s.fail
	c.s.mu.Unlock()
	if block != nil {
		<-block
	}
	if fail != nil {
		return fail
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if slices.ContainsFunc(ops, func(op *storage.Operation) bool { return op.Type == storage.Set }) {
		if c.s.sets+1 == c.s.failSet {
			c.s.failSet = 0
			return errors.New("disk full")
		}
		c.s.sets++
	}
	if c.s.data == nil {
		c.s.data, c.s.writes = map[string][]byte{}, map[string]int{}
	}
	if c.s.writes == nil {
		c.s.writes = map[string]int{}
	}
	for _, op := range ops {
		switch op.Type {
		case storage.Get:
			op.Value = c.s.data[op.Key]
		case storage.Set:
			c.s.data[op.Key] = append([]byte(nil), op.Value...)
			c.s.writes[op.Key]++
		case storage.Delete:
			delete(c.s.data, op.Key)
		}
	}
	return nil
}

func (c *memClient) Close(context.Context) error { return nil }

func (s *subscriber) Start(context.Context, component.Host) error { return nil }

func (s *subscriber) Shutdown(context.Context) error { return nil }

func (s *subscriber) Publish(snap *contract.Snapshot) {
	s.mu.Lock()
	s.snaps = append(s.snaps, snap)
	s.mu.Unlock()
}

func (s *subscriber) last() *contract.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.snaps) == 0 {
		return nil
	}
	return s.snaps[len(s.snaps)-1]
}

func (h host) GetExtensions() map[component.ID]component.Component { return h.ext }
