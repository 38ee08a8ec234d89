package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"time"
)

// Configuration drift: every director says in each v4 heartbeat what its
// service configuration is, as one digest, so that two directors running
// different configurations is seen within a heartbeat. Only while some
// peer's digest differs does a director add a run of its per-service
// digests, a different run each heartbeat, so that the peers can name the
// services that differ. A heartbeat thus carries 23 bytes of it normally
// and at most 280 while the configurations differ, whatever the number of
// services; naming them all takes services / (entries in a run)
// heartbeats (at 10,000 services of 13-byte names, 909: 45 s).
//
// The extension types, in the v4 trailer (identity.Open):
//
//	extConfigDigest:   scheme (1) | digest (16) | services (uint32)
//	extConfigServices: tag (4: the digest's first bytes) | services (uint32) |
//	                   index of the first (uint32) | entries: digest (8),
//	                   name length (1), name
const (
	extConfigDigest   = 0x64
	extConfigServices = 0x73
)

const (
	configDigestLen = 1 + 16 + 4
	configRunHeader = 4 + 4 + 4
	// maxExtension is what one TLV holds (a length byte).
	maxExtension = 255
	// maxWireName cuts longer service names in a run: both sides index
	// their services by the cut name, so only two services whose names
	// share their first 200 bytes could be confused.
	maxWireName = 200
	// maxConfigServices bounds the services a peer may say it has, and so
	// what this director keeps of a peer's run: ten times the largest
	// configuration lvsd is measured with.
	maxConfigServices = 100_000
)

// ConfigDigest is what a director advertises of its service
// configuration: a digest per service (config.Service.Digest) and one over
// all of them. It is never modified once made.
type ConfigDigest struct {
	// Scheme is the version of the per-service digests: directors whose
	// schemes differ cannot compare, and show each other's configuration
	// as unknown.
	Scheme byte
	// Sum is SHA-256 over the services' names and digests in name order,
	// cut to 16 bytes.
	Sum      [16]byte
	services []serviceDigest   // by name
	byName   map[string]uint64 // by wire name (wireName)
	// inForce is the configuration in force while this one is loaded but
	// held (Holding); nil: this one is in force. Never sent.
	inForce   *ConfigDigest
	heldUntil time.Time
}

// Holding returns d marked as loaded but held out of force until every
// live director advertises it (coordinated changes), at the latest until
// until, while inForce runs. A peer that differs only where it has
// inForce's definitions has simply not loaded the change yet: the drift
// check says the change is held instead of warning. The mark is not sent.
func (d *ConfigDigest) Holding(inForce *ConfigDigest, until time.Time) *ConfigDigest {
	held := *d
	held.inForce, held.heldUntil = inForce, until
	return &held
}

type serviceDigest struct {
	name string
	sum  uint64
}

// NewConfigDigest makes the advertisement of services: per-service
// digests by service name, of scheme.
func NewConfigDigest(scheme byte, services map[string]uint64) *ConfigDigest {
	d := &ConfigDigest{Scheme: scheme, byName: make(map[string]uint64, len(services))}
	names := slices.Sorted(maps.Keys(services))
	d.services = make([]serviceDigest, len(names))
	buf := make([]byte, 0, 64*len(names))
	for i, name := range names {
		d.services[i] = serviceDigest{wireName(name), services[name]}
		d.byName[wireName(name)] = services[name]
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
		buf = binary.BigEndian.AppendUint64(buf, services[name])
	}
	sum := sha256.Sum256(buf)
	copy(d.Sum[:], sum[:])
	return d
}

// Services is how many services the digest covers.
func (d *ConfigDigest) Services() int { return len(d.services) }

// String is the digest in hex, for the status.
func (d *ConfigDigest) String() string { return hex.EncodeToString(d.Sum[:]) }

func wireName(name string) string { return name[:min(len(name), maxWireName)] }

// configAdvert is a heartbeat's extConfigDigest.
type configAdvert struct {
	scheme   byte
	sum      [16]byte
	services uint32
}

// configRun is a heartbeat's extConfigServices: services [start,
// start+len(entries)) of the sender's, in name order.
type configRun struct {
	tag      [4]byte
	services uint32
	start    uint32
	entries  []serviceDigest
}

func advertOf(d *ConfigDigest) *configAdvert {
	return &configAdvert{scheme: d.Scheme, sum: d.Sum, services: uint32(len(d.services))}
}

// runFrom returns the run of d's services starting at from that fits one
// extension, and where the next one starts (0 after the last).
func runFrom(d *ConfigDigest, from int) (*configRun, int) {
	if from >= len(d.services) {
		from = 0
	}
	r := &configRun{services: uint32(len(d.services)), start: uint32(from)}
	copy(r.tag[:], d.Sum[:4])
	room := maxExtension - configRunHeader
	i := from
	for ; i < len(d.services) && 9+len(d.services[i].name) <= room; i++ {
		room -= 9 + len(d.services[i].name)
	}
	r.entries = d.services[from:i]
	return r, i % max(len(d.services), 1)
}

// appendExtensions appends the v4 extensions of hb.
func (hb heartbeat) appendExtensions(b []byte) []byte {
	b = hb.appendRestartHold(b)
	if a := hb.Config; a != nil {
		b = append(b, extConfigDigest, configDigestLen, a.scheme)
		b = append(b, a.sum[:]...)
		b = binary.BigEndian.AppendUint32(b, a.services)
	}
	if r := hb.ConfigRun; r != nil {
		at := len(b)
		b = append(b, extConfigServices, 0)
		b = append(b, r.tag[:]...)
		b = binary.BigEndian.AppendUint32(b, r.services)
		b = binary.BigEndian.AppendUint32(b, r.start)
		for _, e := range r.entries {
			b = binary.BigEndian.AppendUint64(b, e.sum)
			b = append(b, byte(len(e.name)))
			b = append(b, e.name...)
		}
		b[at+1] = byte(len(b) - at - 2)
	}
	return b
}

// readExtensions takes the extensions this build knows from exts (well
// formed TLVs). A malformed one of them is left out, not an error: a
// heartbeat is never refused for what only the drift report uses.
func (hb *heartbeat) readExtensions(exts []byte) {
	for len(exts) >= 2 {
		typ, val := exts[0], exts[2:2+int(exts[1])]
		exts = exts[2+int(exts[1]):]
		switch typ {
		case extConfigDigest:
			hb.Config = decodeAdvert(val)
		case extConfigServices:
			hb.ConfigRun = decodeRun(val)
		}
	}
}

func decodeAdvert(b []byte) *configAdvert {
	if len(b) != configDigestLen {
		return nil
	}
	a := &configAdvert{scheme: b[0], services: binary.BigEndian.Uint32(b[17:])}
	copy(a.sum[:], b[1:17])
	if a.scheme == 0 || a.services > maxConfigServices {
		return nil
	}
	return a
}

func decodeRun(b []byte) *configRun {
	if len(b) < configRunHeader {
		return nil
	}
	r := &configRun{services: binary.BigEndian.Uint32(b[4:]), start: binary.BigEndian.Uint32(b[8:])}
	copy(r.tag[:], b)
	if r.services > maxConfigServices || r.start >= max(r.services, 1) {
		return nil
	}
	b = b[configRunHeader:]
	for len(b) > 0 {
		if len(b) < 9 || len(b) < 9+int(b[8]) || int(b[8]) > maxWireName {
			return nil
		}
		r.entries = append(r.entries, serviceDigest{sum: binary.BigEndian.Uint64(b), name: string(b[9 : 9+int(b[8])])})
		b = b[9+int(b[8]):]
	}
	if uint64(r.start)+uint64(len(r.entries)) > uint64(r.services) {
		return nil
	}
	return r
}
