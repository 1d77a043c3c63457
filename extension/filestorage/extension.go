package filestorage // import "github.com/workerwatch/workerwatch/extension/filestorage"

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	contrib "github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
)

// checked is contrib's extension; GetClient checks the client's file first.
type checked struct {
	storage.Extension
	cfg    *contrib.Config
	id     component.ID
	logger *zap.Logger
}

var _ storage.Extension = (*checked)(nil)

// GetClient checks the file contrib is about to open. A corrupt one is moved
// aside (with `recreate: true`, as contrib names its own backups) and logged
// once with its path, so contrib starts a new one; without `recreate` the
// error names the file and the way out.
func (c *checked) GetClient(ctx context.Context, kind component.Kind, ent component.ID, name string) (storage.Client, error) {
	path := c.filePath(kind, ent, name)
	if problem := checkFile(path, c.cfg.Timeout); problem != nil {
		if !c.cfg.Recreate {
			return nil, fmt.Errorf("storage file %s is corrupt (%w); set recreate: true on %s to move corrupt files aside automatically, or move it aside", path, problem, c.id)
		}
		moved := path + "." + time.Now().UTC().Format("20060102T150405.000Z0700") + ".backup"
		if err := os.Rename(path, moved); err != nil {
			return nil, fmt.Errorf("storage file %s is corrupt (%w) and cannot be moved aside: %w", path, problem, err)
		}
		c.logger.Warn("storage file is corrupt: moved it aside, starting with an empty one",
			zap.String("file", path), zap.String("moved_to", moved), zap.Error(problem),
			zap.String("client", fmt.Sprintf("%s %s %s", kind, ent, name)))
	}
	return c.Extension.GetClient(ctx, kind, ent, name)
}

// filePath is where contrib keeps a client's data (extension.go of
// contrib's filestorage v0.165.1: the kind, type, name and client name,
// sanitized, and the SHA-256 of that when it is longer than a file name may
// be). Copied because contrib does not export it.
func (c *checked) filePath(kind component.Kind, ent component.ID, name string) string {
	raw := fmt.Sprintf("%s_%s_%s", kindString(kind), ent.Type(), ent.Name())
	if name != "" {
		raw += "_" + name
	}
	base := sanitize(raw)
	if len(base) > 255 { // NAME_MAX: contrib falls back on ENAMETOOLONG
		sum := sha256.Sum256([]byte(raw))
		base = hex.EncodeToString(sum[:])
	}
	return filepath.Join(c.cfg.Directory, base)
}

func kindString(k component.Kind) string {
	switch k {
	case component.KindReceiver:
		return "receiver"
	case component.KindProcessor:
		return "processor"
	case component.KindExporter:
		return "exporter"
	case component.KindExtension:
		return "extension"
	case component.KindConnector:
		return "connector"
	}
	return "other"
}

// sanitize replaces every character but [A-Za-z0-9._-] with ~ and its
// code point in hex, as contrib does.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "~%04X", r)
		}
	}
	return b.String()
}
