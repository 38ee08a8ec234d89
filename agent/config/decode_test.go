package config

import (
	"reflect"
	"testing"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// Every whole-number field of the raw structs has a range tag the decoder
// can read (a missing one would panic on the first file that sets it).
func TestRangeTags(t *testing.T) {
	for _, schema := range []reflect.Type{reflect.TypeFor[rawAgent](), reflect.TypeFor[rawService]()} {
		if err := yamldoc.CheckSchema(schema); err != nil {
			t.Error(err)
		}
	}
}
