// Package histogram counts durations into the buckets every lvsd histogram
// shares, as plain values: the goroutine that owns one observes into it and
// publishes copies, and the metrics collector turns a copy into a
// Prometheus histogram without keeping any state of its own.
package histogram

import "time"

// Bounds are the buckets' upper bounds in seconds: from half a millisecond
// (a health check on a LAN) to a minute (a reconcile pass of 10,000 services
// on a loaded host).
var Bounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Durations is a histogram of durations; the zero value is empty. It is a
// value: a copy holds its own counts.
type Durations struct {
	counts [len(Bounds)]uint64 // per bucket, not cumulative; longer ones are only in count
	count  uint64
	sum    float64 // seconds
}

// Observe counts one duration.
func (h *Durations) Observe(d time.Duration) {
	s := d.Seconds()
	h.count++
	h.sum += s
	for i, b := range Bounds {
		if s <= b {
			h.counts[i]++
			return
		}
	}
}

// Merge adds o's counts to h.
func (h *Durations) Merge(o Durations) {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of durations observed.
func (h Durations) Count() uint64 { return h.count }

// Sum is their total in seconds.
func (h Durations) Sum() float64 { return h.sum }

// Buckets are the cumulative counts by upper bound, as Prometheus wants
// them (the +Inf bucket is Count).
func (h Durations) Buckets() map[float64]uint64 {
	out := make(map[float64]uint64, len(Bounds))
	var n uint64
	for i, b := range Bounds {
		n += h.counts[i]
		out[b] = n
	}
	return out
}
