package agent

import (
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/ipvs"
)

// The audit reads the whole data plane back, a step every Resync, so that
// what someone else changed behind lvsd's back (ipvsadm, a deleted
// address, a reset sysctl) is corrected without every pass paying for
// everything. A cycle starts with one dump of the service table (services
// missing, changed or added show there), then reads the destinations of
// lvsd's services a chunk per step. Every step also reads the globals
// (sysctls, sync daemons, the nftables digest) and the VIP addresses.
//
// The chunks are sized so that reading them back takes about auditShare of
// the time between steps: the cost is bounded whatever the number of
// services, and a cycle takes as long as it must (docs/performance.md has
// the figures).
const auditShare = 0.005

const (
	minAuditChunk = 16
	maxAuditChunk = 4096
)

// audit is where the rotating read-back stands.
type audit struct {
	next    time.Time       // when the next step is due
	cursor  ipvs.ServiceKey // the last service whose destinations were read
	midway  bool            // a cycle has started: no table dump in the next step
	perRead time.Duration   // what one service's read-back costs, as measured
	started bool            // the current step is in the pending pass
	stepAt  time.Time
	resync  time.Duration
}

// step returns the scope of the next audit step over the services of d
// and owned, and moves the cursor.
func (au *audit) step(d planner.Desired, owned planner.Ownership, now time.Time, resync time.Duration) scope {
	sc := scope{globals: true, holder: true}
	au.started, au.stepAt, au.resync = true, now, resync
	au.next = now.Add(resync)
	if !au.midway {
		au.midway, au.cursor = true, ipvs.ServiceKey{}
		sc.table = true
		return sc
	}
	n := au.chunk(resync)
	keys := servicesAfter(d, owned, au.cursor, n)
	if len(keys) < n {
		au.midway = false // the cycle ends: the next step dumps the table again
	}
	if len(keys) > 0 {
		au.cursor = keys[len(keys)-1]
	}
	sc.add(keys...)
	return sc
}

// chunk is how many services a step reads back to spend auditShare of a
// Resync on it.
func (au *audit) chunk(resync time.Duration) int {
	if au.perRead <= 0 {
		return minAuditChunk
	}
	n := int(time.Duration(float64(resync)*auditShare) / au.perRead)
	return min(max(n, minAuditChunk), maxAuditChunk)
}

// measured records what reading back n services took in a pass that ran
// an audit step, and puts the next step off when it took longer than
// auditShare allows.
func (au *audit) measured(n int, took time.Duration) {
	if !au.started {
		return
	}
	au.started = false
	if n > 0 && took > 0 { // a clock that did not move measured nothing
		per := took / time.Duration(n)
		if au.perRead == 0 {
			au.perRead = per
		} else {
			au.perRead = (3*au.perRead + per) / 4
		}
	}
	if wait := time.Duration(float64(took) / auditShare); wait > au.resync {
		au.next = au.stepAt.Add(wait)
	}
}

// servicesAfter returns up to n keys of services lvsd wants or owns that
// sort after cursor (zero: from the start), in order.
func servicesAfter(d planner.Desired, owned planner.Ownership, cursor ipvs.ServiceKey, n int) []ipvs.ServiceKey {
	i, j := 0, 0
	if cursor != (ipvs.ServiceKey{}) {
		i, _ = slices.BinarySearchFunc(d.Services, cursor, func(vs *planner.VirtualService, k ipvs.ServiceKey) int {
			return vs.ServiceKey.Compare(k)
		})
		j, _ = slices.BinarySearchFunc(owned.Services, cursor, ipvs.ServiceKey.Compare)
		for i < len(d.Services) && d.Services[i].ServiceKey == cursor {
			i++
		}
		for j < len(owned.Services) && owned.Services[j] == cursor {
			j++
		}
	}
	var out []ipvs.ServiceKey
	for len(out) < n && (i < len(d.Services) || j < len(owned.Services)) {
		switch {
		case j == len(owned.Services) || i < len(d.Services) && d.Services[i].ServiceKey.Compare(owned.Services[j]) < 0:
			out = append(out, d.Services[i].ServiceKey)
			i++
		case i == len(d.Services) || owned.Services[j].Compare(d.Services[i].ServiceKey) < 0:
			out = append(out, owned.Services[j])
			j++
		default:
			out = append(out, d.Services[i].ServiceKey)
			i, j = i+1, j+1
		}
	}
	return out
}
