package realserver

import (
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/statefile"
)

// RecordFile is the name of the real server's record in state_dir.
const RecordFile = "realserver.json"

// Record is what lvsd added on this host and the drain state: everything a
// restarted agent or `lvsd cleanup` must know.
type Record struct {
	// Addresses lvsd put on lo.
	Addresses []netip.Prefix `json:"addresses"`
	// Sysctls lvsd changed, with the values it found.
	Sysctls []OwnedSysctl `json:"sysctls"`
	// Links are the tunnel devices lvsd brought up (or created).
	Links []OwnedLink `json:"links,omitempty"`
	// FouPorts are the GUE receive ports lvsd opened.
	FouPorts []OwnedFouPort `json:"fou_ports,omitempty"`
	// NAT says lvsd put its nftables tables (the MSS clamp) in place.
	NAT bool `json:"nft,omitempty"`
	// Drained makes the weight endpoint announce 0 until undrained; it
	// survives restarts and cleanup.
	Drained   bool      `json:"drained"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
}

// OwnedSysctl is a sysctl lvsd set to Value, which was Previous before.
type OwnedSysctl struct {
	Key      string `json:"key"`
	Previous string `json:"previous"`
	Value    string `json:"value"`
}

func (r *Record) addAddress(p netip.Prefix) bool {
	if slices.Contains(r.Addresses, p) {
		return false
	}
	r.Addresses = append(r.Addresses, p)
	return true
}

func (r *Record) dropAddress(p netip.Prefix) {
	r.Addresses = slices.DeleteFunc(r.Addresses, func(x netip.Prefix) bool { return x == p })
}

// addSysctl records that key goes from previous to value. A key already
// recorded keeps the value lvsd found first: that is what cleanup restores.
func (r *Record) addSysctl(key, previous, value string) bool {
	for i := range r.Sysctls {
		if r.Sysctls[i].Key == key {
			r.Sysctls[i].Value = value
			return false
		}
	}
	r.Sysctls = append(r.Sysctls, OwnedSysctl{Key: key, Previous: previous, Value: value})
	return true
}

func (r *Record) dropSysctl(key string) {
	r.Sysctls = slices.DeleteFunc(r.Sysctls, func(s OwnedSysctl) bool { return s.Key == key })
}

func (r Record) clone() Record {
	r.Addresses = slices.Clone(r.Addresses)
	r.Sysctls = slices.Clone(r.Sysctls)
	r.Links = slices.Clone(r.Links)
	r.FouPorts = slices.Clone(r.FouPorts)
	return r
}

func (r Record) equal(o Record) bool {
	return slices.Equal(r.Addresses, o.Addresses) && slices.Equal(r.Sysctls, o.Sysctls) &&
		slices.Equal(r.Links, o.Links) && slices.Equal(r.FouPorts, o.FouPorts) && r.NAT == o.NAT &&
		r.Drained == o.Drained && r.DrainedAt.Equal(o.DrainedAt)
}

// LoadRecord reads the record in stateDir. A missing file is an empty
// record (first start); a corrupt one is an error, since guessing could
// make cleanup remove what is not lvsd's.
func LoadRecord(stateDir string) (Record, error) {
	var r Record
	if err := statefile.Load(stateDir, RecordFile, &r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// SaveRecord writes r atomically: a crash leaves the old or the new record,
// never a torn one.
func SaveRecord(stateDir string, r Record) error {
	return statefile.Save(stateDir, RecordFile, r)
}
