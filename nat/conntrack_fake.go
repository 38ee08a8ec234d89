package nat

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// ConntrackFake keeps restored entries in memory. Like the kernel it
// reports an entry whose original tuple exists as existing (EEXIST), and
// refuses entries the kernel would refuse.
type ConntrackFake struct {
	mu      sync.Mutex // guards all following fields
	entries []ConntrackEntry
	calls   int
	fail    error // every entry fails with it
}

var _ ConntrackRestorer = (*ConntrackFake)(nil)

type origTuple struct {
	proto          l4.Protocol
	client, target netip.AddrPort
}

// Entries returns the entries created so far, in order.
func (f *ConntrackFake) Entries() []ConntrackEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

// Calls returns how many times RestoreConntrack was called.
func (f *ConntrackFake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// FailWith makes every later entry fail with err (nil: succeed again).
func (f *ConntrackFake) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// RestoreConntrack implements ConntrackRestorer.
func (f *ConntrackFake) RestoreConntrack(ctx context.Context, entries []ConntrackEntry) (RestoreResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	var res RestoreResult
	var errs []error
	have := map[origTuple]int{} // index in f.entries, plus one
	for i, e := range f.entries {
		have[origTuple{e.Protocol, e.Client, e.VIP}] = i + 1
	}
	res.Outcomes = make([]RestoreOutcome, len(entries))
	for i, e := range entries {
		err := checkEntry(e)
		if err == nil {
			err = f.fail
		}
		k := origTuple{e.Protocol, e.Client, e.VIP}
		switch {
		case err != nil:
			res.Failed++
			res.Outcomes[i] = OutcomeFailed
			errs = append(errs, fmt.Errorf("%s: %w", e, err))
		case have[k] > 0:
			res.Existing++
			res.Outcomes[i] = OutcomeExisting
			old := &f.entries[have[k]-1]
			switch {
			case !e.Refresh && !e.NoCreate:
			case old.Backend == e.Backend && old.SNATFrom == e.SNATFrom && old.SNATTo == e.SNATTo:
				old.Timeout, old.Closing = e.Timeout, e.Closing
				res.Refreshed++
				res.Outcomes[i] = OutcomeRefreshed
			case e.NoCreate:
				res.Existing--
				res.Absent++
				res.Outcomes[i] = OutcomeAbsent
			default:
				*old = e
				res.Replaced++
				res.Outcomes[i] = OutcomeReplaced
			}
		case e.NoCreate:
			res.Absent++
			res.Outcomes[i] = OutcomeAbsent
		default:
			have[k] = len(f.entries) + 1
			f.entries = append(f.entries, e)
			res.Created++
			res.Outcomes[i] = OutcomeCreated
		}
	}
	if len(errs) > maxRestoreErrors {
		errs = append(errs[:maxRestoreErrors], fmt.Errorf("and %d more", len(errs)-maxRestoreErrors))
	}
	return res, errors.Join(errs...)
}

// ErrFakeConntrack is a ready-made failure for FailWith.
var ErrFakeConntrack = fmt.Errorf("fake conntrack: %w", syscall.ENOMEM)
