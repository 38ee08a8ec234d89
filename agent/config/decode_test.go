package config

import (
	"reflect"
	"testing"
)

// Every whole-number field of the raw structs has a range tag the decoder
// can read (a missing one would panic on the first file that sets it).
func TestRangeTags(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Int {
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s.%s: %v", path, f.Name, r)
						}
					}()
					if lo, hi := parseRange(f.Tag.Get("range")); lo > hi {
						t.Errorf("%s.%s: range %d-%d", path, f.Name, lo, hi)
					}
				}()
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeFor[rawAgent](), "rawAgent")
	walk(reflect.TypeFor[rawService](), "rawService")
}
