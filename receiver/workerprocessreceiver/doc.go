// Package workerprocessreceiver samples each worker's whole process tree
// (the worker's root process, its engine and its child workers) from /proc and
// cgroup v2, at a cost that grows with the worker's tree rather than with the
// number of processes on the host.
//
//go:generate mdatagen metadata.yaml
package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"
