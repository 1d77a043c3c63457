package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// Bytes is a size flag that accepts "20MiB", "1GiB", "512KiB", "30MB" or a
// plain number of bytes, so memory knobs read the way people think of them.
type Bytes int64

var units = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "MiB" is not read as "B".
	{"KiB", 1 << 10},
	{"MiB", 1 << 20},
	{"GiB", 1 << 30},
	{"KB", 1000},
	{"MB", 1000 * 1000},
	{"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10},
	{"M", 1 << 20},
	{"G", 1 << 30},
	{"B", 1},
}

// ParseBytes parses a size such as "20MiB".
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 20MiB, 1GiB or a number of bytes)", s)
	}
	return int64(f * float64(mult)), nil
}

// String formats the size in the largest binary unit that keeps it whole.
func (b *Bytes) String() string {
	v := int64(*b)
	switch {
	case v != 0 && v%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", v>>30)
	case v != 0 && v%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", v>>20)
	case v != 0 && v%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", v>>10)
	}
	return strconv.FormatInt(v, 10)
}

// Set implements flag.Value.
func (b *Bytes) Set(s string) error {
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = Bytes(v)
	return nil
}
