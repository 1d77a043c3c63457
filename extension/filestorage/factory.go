package filestorage // import "github.com/workerwatch/workerwatch/extension/filestorage"

import (
	"context"
	"fmt"

	contrib "github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/workerwatch/workerwatch/extension/filestorage/internal/metadata"
)

// NewFactory returns the file_storage factory: contrib's configuration and
// extension, with the files checked before they are opened (doc.go).
func NewFactory() extension.Factory {
	inner := contrib.NewFactory()
	return extension.NewFactory(metadata.Type, inner.CreateDefaultConfig,
		func(ctx context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
			ext, err := inner.Create(ctx, set, cfg)
			if err != nil {
				return nil, err
			}
			se, ok := ext.(storage.Extension)
			if !ok {
				return nil, fmt.Errorf("contrib's file_storage is not a storage extension (%T)", ext)
			}
			return &checked{Extension: se, cfg: cfg.(*contrib.Config), id: set.ID, logger: set.Logger}, nil
		},
		metadata.ExtensionStability)
}
