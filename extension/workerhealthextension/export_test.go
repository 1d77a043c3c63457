package workerhealthextension

import (
	"reflect"
	"time"
	"unsafe"

	"go.opentelemetry.io/collector/component/componentstatus"
)

// withTimestamp sets an event's timestamp, which componentstatus only sets
// to time.Now(): the probe tests need a controlled clock.
func withTimestamp(ev *componentstatus.Event, at time.Time) *componentstatus.Event {
	f := reflect.ValueOf(ev).Elem().FieldByName("timestamp")
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(at))
	return ev
}
