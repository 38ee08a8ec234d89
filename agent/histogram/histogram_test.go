package histogram

import (
	"testing"
	"time"
)

// Durations land in the first bucket whose bound holds them, the
// buckets add up, and Merge adds two histograms.
func TestDurations(t *testing.T) {
	var h Durations
	for _, d := range []time.Duration{0, 500 * time.Microsecond, 700 * time.Microsecond, 2 * time.Second, 90 * time.Second} {
		h.Observe(d)
	}
	b := h.Buckets()
	for bound, want := range map[float64]uint64{0.0005: 2, 0.001: 3, 2.5: 4, 60: 4} {
		if b[bound] != want {
			t.Errorf("bucket le=%g: %d, want %d", bound, b[bound], want)
		}
	}
	if h.Count() != 5 || h.Sum() != 92.0012 {
		t.Errorf("count %d sum %g, want 5 and 92.0012", h.Count(), h.Sum())
	}
	copied := h
	h.Merge(copied)
	if h.Count() != 10 || h.Buckets()[0.001] != 6 || copied.Count() != 5 {
		t.Errorf("after merging a copy: count %d, le=0.001 %d, copy's count %d", h.Count(), h.Buckets()[0.001], copied.Count())
	}
}
