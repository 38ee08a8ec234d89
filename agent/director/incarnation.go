package director

import (
	"log/slog"
	"time"

	"github.com/lvsd/lvsd/agent/statefile"
)

// incarnationFile is the record in state_dir of the last incarnation this
// director started its cluster node and relay with.
const incarnationFile = "incarnation.json"

type incarnationRecord struct {
	Incarnation uint64 `json:"incarnation"`
}

// nextIncarnation returns the incarnation this start of the director goes
// by in the cluster, and records it in dir before the node starts: the
// peers refuse, as a replay, a heartbeat of a lower incarnation than the
// last one they used from this director until it has been silent for the
// failure timeout, so it must grow with every start even when the clock
// went back (a host that booted before its clock was set).
//
// It is max(last + 1, the clock in Unix nanoseconds). The clock keeps it
// above every incarnation a release that took the start time as its
// incarnation could have sent, so peers running such a release take it
// during a rolling upgrade; last + 1 keeps it growing when the clock went
// back. If the record cannot be read or written it logs why and returns
// the clock, as those releases did: a director that cannot write its state
// directory still starts.
func nextIncarnation(dir string, now time.Time, log *slog.Logger) uint64 {
	clock := uint64(now.UnixNano())
	var last incarnationRecord
	if err := statefile.Load(dir, incarnationFile, &last); err != nil {
		log.Warn("cannot read the last incarnation; taking the clock, which peers refuse for a failure timeout if it went back", "err", err)
		if err := statefile.Save(dir, incarnationFile, incarnationRecord{clock}); err != nil {
			log.Warn("cannot record the incarnation", "dir", dir, "err", err)
		}
		return clock
	}
	next := max(last.Incarnation+1, clock)
	if err := statefile.Save(dir, incarnationFile, incarnationRecord{next}); err != nil {
		// Not recorded, next could come again at the next start: the
		// clock at least differs from start to start.
		log.Warn("cannot record the incarnation; taking the clock, which peers refuse for a failure timeout if it went back", "dir", dir, "err", err)
		return clock
	}
	return next
}
