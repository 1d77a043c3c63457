package filestorage // import "github.com/workerwatch/workerwatch/extension/filestorage"

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// errEmpty: bbolt writes its meta pages when it creates a file, so an empty
// one was cut short or written by something else; it is set aside and said,
// not silently reinitialized.
var errEmpty = errors.New("the file is empty")

// checkFile returns why the bbolt file at path cannot be opened safely, or
// nil: no file, a sound one, or one another process holds (not ours to
// judge; contrib's open reports the lock).
//
// It opens the file read-only (no freelist scan, so no goroutine of bbolt's)
// and reads every page the way contrib's open will: the size against the
// pages the meta page claims (a truncated file), every bucket, key and value
// (faults become panics here: debug.SetPanicOnFault), then bbolt's own
// consistency check, which contrib's open would turn into a panic.
func checkFile(path string, lockTimeout time.Duration) error {
	st, err := os.Stat(path)
	if err != nil || st.IsDir() {
		return nil // nothing there (or not readable: contrib says so)
	}
	if st.Size() == 0 {
		return errEmpty
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: max(lockTimeout, 100*time.Millisecond)})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("not a bbolt file: %w", err)
	}
	defer db.Close()
	return readAll(db, st.Size())
}

// readAll reads every page of db; a fault or panic is the file's fault.
func readAll(db *bbolt.DB, size int64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading it failed: %v", r)
		}
	}()
	return db.View(func(tx *bbolt.Tx) error {
		if need := tx.Size(); need > size {
			return fmt.Errorf("truncated: %d bytes, its pages need %d", size, need)
		}
		var sum byte
		var walk func(b *bbolt.Bucket) error
		walk = func(b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					if child := b.Bucket(k); child != nil {
						return walk(child)
					}
					return nil
				}
				for _, x := range v { // touch every byte: overflow pages too
					sum ^= x
				}
				return nil
			})
		}
		if err := tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return walk(b) }); err != nil {
			return err
		}
		_ = sum
		// Every page was read above without a fault, so the check's own
		// goroutine reads nothing that could fault.
		var errs []error
		for e := range tx.Check() {
			errs = append(errs, e)
		}
		if len(errs) > 0 {
			return fmt.Errorf("inconsistent: %w", errors.Join(errs...))
		}
		return nil
	})
}
