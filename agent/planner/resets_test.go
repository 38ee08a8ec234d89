package planner

import (
	"fmt"
	"testing"
)

// A whole-service reset never leaves the service without an eligible
// destination: ineligible ones go first, then the eligible in two halves.
func TestResetBatches(t *testing.T) {
	vs := VirtualService{}
	for _, w := range []uint16{0, 1, 0, 1, 1} {
		vs.Destinations = append(vs.Destinations, Destination{Weight: w})
	}
	cases := []struct {
		idx  []int
		want string
	}{
		{[]int{0, 1, 2, 3, 4}, "[[0 2] [1] [3 4]]"},
		{[]int{0, 2}, "[[0 2]]"},
		{[]int{3}, "[[3]]"},
		{[]int{1, 4}, "[[1] [4]]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(resetBatches(&vs, c.idx)); got != c.want {
			t.Errorf("batches of %v: %s, want %s", c.idx, got, c.want)
		}
	}
}
