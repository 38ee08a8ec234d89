package config

import (
	"fmt"
	"testing"
)

func TestNames(t *testing.T) {
	for _, n := range []int{0, 1, namesCompared, namesCompared + 1, 50} {
		m := map[string]bool{"off": false}
		for i := range n {
			m[fmt.Sprintf("s%d", i)] = true
		}
		names := NamesOf(m)
		for i := range n {
			if !names.Has(fmt.Sprintf("s%d", i)) {
				t.Errorf("%d names: s%d missing", n, i)
			}
		}
		for _, s := range []string{"off", fmt.Sprintf("s%d", n), ""} {
			if names.Has(s) {
				t.Errorf("%d names: %q found", n, s)
			}
		}
	}
	// Same length and last byte, different inside; and the empty name.
	names := NamesOf(map[string]bool{"web-a-1": true, "": true})
	if names.Has("web-b-1") || !names.Has("web-a-1") || !names.Has("") {
		t.Error("names told apart by length and last byte only")
	}
	if NamesOf(nil).Has("x") {
		t.Error("the empty set has x")
	}
}
