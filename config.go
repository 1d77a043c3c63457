// Package workerwatch holds what belongs to the distribution as a whole: the
// built-in default configuration (config.yaml beside this file), which the
// otelcol-workerwatch binary uses when it is started without --config.
package workerwatch

import _ "embed"

// DefaultConfig is config.yaml, embedded so the binary runs with no flags.
//
//go:embed config.yaml
var DefaultConfig []byte
