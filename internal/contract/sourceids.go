package contract // import "github.com/workerwatch/workerwatch/internal/contract"

import (
	"encoding/json"
	"iter"
)

// SourceIDs is a source's "key=value" ids of a worker (Source.IDs): its
// JSON is the list of strings, [] when there is none.
//
// Held as the "key=" prefixes, shared by every worker a source named by the
// same attributes, and the worker's id, which the snapshot holds anyway (a
// list read from JSON is held whole: its strings as the prefixes, no id).
// Why: built as strings, every worker's snapshot held a list and a
// "key=value" string of its own at every evaluation, 64 bytes a worker
// (docs/results/density.md, "ids shared").
type SourceIDs struct {
	prefixes *[]string // nil: no id
	id       string
}

// PrefixedIDs are the ids prefix+id for each of prefixes (which the value
// shares: never changed after).
func PrefixedIDs(prefixes *[]string, id string) SourceIDs {
	return SourceIDs{prefixes: prefixes, id: id}
}

// IDList is ids as they are.
func IDList(ids ...string) SourceIDs {
	if len(ids) == 0 {
		return SourceIDs{}
	}
	return SourceIDs{prefixes: &ids}
}

// Len is how many ids there are.
func (s SourceIDs) Len() int {
	if s.prefixes == nil {
		return 0
	}
	return len(*s.prefixes)
}

// All yields the ids in order.
func (s SourceIDs) All() iter.Seq[string] {
	return func(yield func(string) bool) {
		if s.prefixes == nil {
			return
		}
		for _, p := range *s.prefixes {
			if !yield(p + s.id) {
				return
			}
		}
	}
}

// List is the ids as a new slice (empty, not nil, when there is none).
func (s SourceIDs) List() []string {
	out := make([]string, 0, s.Len())
	for id := range s.All() {
		out = append(out, id)
	}
	return out
}

// MarshalJSON writes the list of ids, as a []string would be written.
func (s SourceIDs) MarshalJSON() ([]byte, error) { return json.Marshal(s.List()) }

// UnmarshalJSON reads a list of strings (null: none).
func (s *SourceIDs) UnmarshalJSON(b []byte) error {
	var ids []string
	if err := json.Unmarshal(b, &ids); err != nil {
		return err
	}
	*s = IDList(ids...)
	return nil
}
