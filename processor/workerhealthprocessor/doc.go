// Package workerhealthprocessor derives each worker's health state and the claim
// drift between the scheduler and the worker (docs/health-rules.md).
package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

//go:generate mdatagen metadata.yaml
