package nat

import (
	"context"
)

// FULLNAT connections after a takeover. IPVS connection sync gives the new
// owner of a VIP the IPVS entries of its connections, but not the conntrack
// entries that carry their source NAT. A real server's packet to a SNAT
// address then finds no entry on the new owner and would reach its local
// stack (which answers with a reset) instead of being translated back to the
// client. So before the new owner adds the addresses, it creates for every
// synced connection the entry the old owner had:
//
//	original  client:cport -> VIP:vport
//	reply     RS:rport     -> SNAT:sport
//
// The reply is not written as such: the entry is created with the reply
// RS:rport -> client:cport (what ip_vs_update_conntrack made it before the
// SNAT rule ran) and a source NAT to the SNAT address the old owner's rule
// chose, a hash of the client address (conntrack_hash.go). The kernel then
// does what it did on the old owner: it keeps the client's port while no
// other entry uses SNAT:cport -> RS:rport.

// RestoreResult counts what RestoreConntrack did.
type RestoreResult struct {
	Created  int // new entries
	Existing int // already there (EEXIST): a local connection or an earlier restore
	// Refreshed counts the existing entries given their Timeout (Refresh);
	// an entry that went meanwhile is neither refreshed nor failed.
	Refreshed int
	// Replaced counts the existing entries of another connection (Refresh)
	// deleted and created again as asked.
	Replaced int
	Failed   int // refused by the kernel; the error says why
	// Absent counts the NoCreate entries that had no entry to refresh.
	Absent int
	// Outcomes are each entry's outcome, in the order of the entries.
	Outcomes []RestoreOutcome
}

// RestoreOutcome is what RestoreConntrack did with one entry.
type RestoreOutcome uint8

// The outcomes of an entry: an existing one refreshed or replaced reports
// the latter (and counts as Existing too).
const (
	OutcomeNone      RestoreOutcome = iota // not reached: the context ended or the socket failed
	OutcomeCreated                         // a new entry
	OutcomeExisting                        // there already, left alone
	OutcomeRefreshed                       // there already, given the entry's Timeout
	OutcomeReplaced                        // another connection's entry, made this one's
	OutcomeFailed                          // refused by the kernel
	OutcomeAbsent                          // NoCreate, and no entry to refresh
)

// New reports whether the outcome is an entry RestoreConntrack made.
func (o RestoreOutcome) New() bool { return o == OutcomeCreated || o == OutcomeReplaced }

// ConntrackRestorer creates conntrack entries. Kernel and ConntrackFake
// implement it.
type ConntrackRestorer interface {
	// RestoreConntrack creates every entry that does not exist yet. It goes
	// on after a failed entry; the error joins the first failures.
	RestoreConntrack(ctx context.Context, entries []ConntrackEntry) (RestoreResult, error)
}
