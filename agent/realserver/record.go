package realserver

import (
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/statefile"
)

// RecordFile is the name of the real server's record in state_dir.
const RecordFile = "realserver.json"

// claims are the kinds of object the real server's record takes on: all
// it changes on the host, which cleanup undoes.
const claims = planner.ClaimAddresses | planner.ClaimHost

// Record is the content of RecordFile: what lvsd added on this host (the
// ownership record both roles keep, with the real server's parts) and the
// drain state, which is not ownership but shares the file because the same
// goroutine writes both and both must survive a restart. Everything a
// restarted agent or `lvsd cleanup` must know.
type Record struct {
	planner.Ownership
	// Drained makes the weight endpoint announce 0 until undrained; it
	// survives restarts and cleanup.
	Drained   bool      `json:"drained"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
}

// OwnedSysctl is a sysctl lvsd set, as the status shows it.
type OwnedSysctl = planner.OwnedSysctl

// LoadRecord reads the record in stateDir. A missing file is an empty
// record (first start); a corrupt one is an error, since guessing could
// make cleanup remove what is not lvsd's. The addresses are kept as bare
// prefixes (recordFile): they are all on lo.
func LoadRecord(stateDir string) (Record, error) {
	var r Record
	if err := statefile.Load(stateDir, RecordFile, &r); err != nil {
		return Record{}, err
	}
	for i := range r.Addresses {
		if r.Addresses[i].Interface == "" {
			r.Addresses[i].Interface = planner.Loopback
		}
	}
	return r, nil
}

// SaveRecord writes r atomically: a crash leaves the old or the new record,
// never a torn one.
func SaveRecord(stateDir string, r Record) error {
	f := recordFile{Record: r, Addresses: make([]netip.Prefix, 0, len(r.Addresses))}
	for _, a := range r.Addresses {
		f.Addresses = append(f.Addresses, a.Prefix)
	}
	return statefile.Save(stateDir, RecordFile, f)
}

// recordFile is a Record as the file keeps it: the addresses as bare
// prefixes, every one on lo, as releases before the shared ownership record
// wrote them, so that a release before it still reads the file (a
// downgrade, or `lvsd cleanup` of the older package).
type recordFile struct {
	Record
	Addresses []netip.Prefix `json:"addresses"` // shadows Ownership.Addresses
}
