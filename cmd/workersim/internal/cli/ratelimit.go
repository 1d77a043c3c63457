package cli

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// RateLimited prints to stderr at most one line per interval and counts what
// it held back: a worker whose scheduler or collector is gone must keep
// running without flooding its log.
type RateLimited struct {
	Prefix string
	Every  time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Printf prints unless a line was printed less than Every ago.
func (l *RateLimited) Printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.suppressed++
		return
	}
	more := ""
	if l.suppressed > 0 {
		more = fmt.Sprintf(" (%d similar messages suppressed)", l.suppressed)
	}
	fmt.Fprintf(os.Stderr, "workersim: %s: %s%s\n", l.Prefix, fmt.Sprintf(format, a...), more)
	l.last, l.suppressed = now, 0
}
