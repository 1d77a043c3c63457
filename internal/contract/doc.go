// Package contract is the one written contract between workerwatch's parts:
// the worker_process receiver, the worker_health processor, the worker_health
// extension, the simulator (cmd/workersim) and the end-to-end tests.
//
// Every name more than one of them uses lives here, once, with what its value
// means: metric names and units, attribute keys and their values, process
// roles, lifecycle event names, kill reasons, health states, the snapshot the
// processor publishes to the extension (whose JSON tags are the health API's
// schema, docs/http-api.md) and the one definition of CPU utilization
// (cpu.go). A string repeated across packages is how meanings drift apart:
// the receiver once divided CPU by the CPUs the worker may use while the
// processor multiplied it by the collector host's CPU count.
//
// docs/telemetry.md lists every name for people; this package is where the
// code takes them from. It imports nothing of the components, so any of them
// may import it (the extension must not import the processor or the
// receiver: go list -deps ./extension/... shows neither).
package contract
