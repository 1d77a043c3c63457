// Package filestorage is contrib's file_storage extension, with every bbolt
// file checked before contrib opens it.
//
// Why a wrapper: bbolt faults (SIGBUS, "unexpected fault address") inside a
// goroutine of its own when it opens a truncated file, which no recover can
// catch, so the collector exits with status 2 on every start; random bytes
// and an empty file are refused with errors that do not name the file, or
// accepted silently. contrib's `recreate` option only recovers from panics
// in the opening goroutine. The file's path is known only here (the storage
// extension's directory and naming), so the check is done here, before the
// file is opened, in a goroutine where faults are turned into panics
// (runtime/debug.SetPanicOnFault) and recovered. Everything else, the
// configuration included, is contrib's file_storage, unchanged.
package filestorage // import "github.com/workerwatch/workerwatch/extension/filestorage"

//go:generate mdatagen metadata.yaml
