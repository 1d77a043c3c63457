// Package workerhealthextension serves the worker_health processor's
// judgement of every worker over HTTP: a per-worker answer a scheduler or a
// Kubernetes probe can trust (200 may take work, 503 must not, 404 unknown),
// the whole fleet as JSON and as a live status page, and /livez and /readyz
// for the collector itself, kept apart because merged liveness and readiness
// probes cause restart storms.
//
// It receives state through contract.Subscriber (the processor names it in
// its health_extension key) and never imports the processor.
package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

//go:generate mdatagen metadata.yaml
