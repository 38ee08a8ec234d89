package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// heartbeat is what each director sends every heartbeat interval to every
// other one, as a memberlist user message (so it is encrypted and labelled
// like the gossip): who it is, whether it may own VIPs, and the VIPs it is
// configured for with the ones it holds. A VIP list too long for one UDP
// packet is split into parts sharing seq.
//
// Heard echoes the incarnations of the directors the sender has heard from
// lately, as BFD's "your discriminator" does: a receiver that has no memory
// of the sender (it started after the sender's last heartbeat it used)
// takes a heartbeat only if it echoes the receiver's own incarnation, which
// no heartbeat captured before the receiver started can (heartbeatGuard).
type heartbeat struct {
	Name        string
	Addr        string // memberlist address of the sender, to join it after a partition
	Incarnation uint64 // start time of the sender's process: a restart is a new director
	Seq         uint64 // grows with every heartbeat of an incarnation; the parts of one share it
	Priority    int
	Ready       bool // past the start-up hold
	Leaving     bool // shutting down: count it as gone now
	Part, Parts int
	Heard       []uint64
	VIPs        []vipClaim
	// SharesHealth: the sender takes part in the health vote (cluster
	// mode ecmp); Down lists the health targets it sees down, by
	// HealthID, split over the parts like VIPs.
	SharesHealth bool
	Down         []uint64
	// Config is the sender's configuration digest and ConfigRun a run of
	// its per-service digests (v4 extensions, configwire.go); nil: not sent.
	Config    *configAdvert
	ConfigRun *configRun
	// RestartHold (v4 extension, restarthold.go): the sender is about to
	// restart; its peers keep its VIPs where they are for this long. Zero:
	// no hold.
	RestartHold time.Duration

	// Version is the wire version the heartbeat came in (decodeHeartbeat).
	Version byte
	// signed is what sig signs (a v4 part without its signature); both
	// nil when the part is unsigned.
	signed, sig []byte
}

type vipClaim struct {
	VIP  netip.Addr
	Held bool
}

// Wire versions. 2 added Heard, 3 the health vote (flagHealth and each
// part's Down list), 4 the extensions and the signature:
//
//	v4 part = v3 part (version byte 4) | extensions | uint16 length of
//	          the extensions | signature (64 bytes) when flagSigned
//
// The trailer is cluster/identity's (Seal, Open): unknown extensions are
// skipped, so later additions need no new version; a change a reader must
// not skip needs one.
//
// This build reads v3 and v4, and sends each peer the highest version it
// has heard from it (wireVersions); a director of the release before,
// which reads v3 only, keeps working beside it in a rolling upgrade.
const (
	hbMagic     = 'H'
	hbVersionV3 = 3
	hbVersion   = 4 // the newest this build speaks
	// hbMaxBytes keeps a heartbeat in one UDP datagram of memberlist's
	// default 1400-byte buffer, leaving room for its headers (type, CRC,
	// AES-GCM, label).
	hbMaxBytes  = 1100
	hbHeader    = 2 + 1 + 2 + 8 + 8 + 4
	flagReady   = 1
	flagLeaving = 2
	flagHealth  = 4
	flagSigned  = 8 // v4: a signature ends the part
	claimHeld   = 1
	claimV6     = 2
	// maxHeard bounds Heard, 8 bytes each in every part.
	maxHeard = 32
)

var errShort = errors.New("heartbeat truncated")

// versionError is a heartbeat of another lvsd version: worth a warning,
// since such directors never hear each other.
type versionError byte

func (v versionError) Error() string {
	return fmt.Sprintf("heartbeat of version %d, this lvsd reads %d and %d (a director more than one release apart)", byte(v), hbVersionV3, hbVersion)
}

// encode returns hb as v3 parts, the version every director since the
// health vote reads.
func (hb heartbeat) encode() [][]byte { return hb.encodeAs(hbVersionV3, nil) }

// encodeAs returns hb as one or more packets (parts) of at most hbMaxBytes
// in wire version v (3 or 4), each signed with keys when v is 4 and keys
// has a private key.
func (hb heartbeat) encodeAs(v byte, keys *identity.Keys) [][]byte {
	sign := v >= 4 && keys.Signs()
	limit := hbMaxBytes // what the v3 layout may fill
	var exts []byte
	if v >= 4 {
		exts = hb.appendExtensions(nil)
		limit -= keys.TrailerRoom() + len(exts)
	}
	head := make([]byte, 0, hbHeader+2+len(hb.Name)+len(hb.Addr))
	head = append(head, hbMagic, v)
	var flags byte
	if sign {
		flags |= flagSigned
	}
	if hb.Ready {
		flags |= flagReady
	}
	if hb.Leaving {
		flags |= flagLeaving
	}
	if hb.SharesHealth {
		flags |= flagHealth
	}
	head = append(head, flags, 0, 0) // part, parts filled in below
	head = binary.BigEndian.AppendUint64(head, hb.Incarnation)
	head = binary.BigEndian.AppendUint64(head, hb.Seq)
	head = binary.BigEndian.AppendUint32(head, uint32(int32(hb.Priority)))
	head = append(head, byte(len(hb.Name)))
	head = append(head, hb.Name...)
	head = append(head, byte(len(hb.Addr)))
	head = append(head, hb.Addr...)
	heard := hb.Heard[:min(len(hb.Heard), maxHeard)]
	head = append(head, byte(len(heard)))
	for _, inc := range heard {
		head = binary.BigEndian.AppendUint64(head, inc)
	}

	var parts [][]byte
	vips, down := hb.VIPs, hb.Down
	room := limit // for claims: the health section's count comes after them
	if hb.SharesHealth {
		room -= 2
	} else {
		down = nil
	}
	for {
		p := append(append(make([]byte, 0, hbMaxBytes), head...), 0, 0)
		n := 0
		for ; n < len(vips) && len(p)+17 <= room; n++ {
			var f byte
			if vips[n].Held {
				f |= claimHeld
			}
			if vips[n].VIP.Is6() {
				f |= claimV6
			}
			p = append(p, f)
			p = append(p, vips[n].VIP.AsSlice()...)
		}
		binary.BigEndian.PutUint16(p[len(head):], uint16(n))
		vips = vips[n:]
		if hb.SharesHealth {
			at := len(p)
			p = append(p, 0, 0)
			k := 0
			for ; k < len(down) && len(p)+8 <= limit; k++ {
				p = binary.BigEndian.AppendUint64(p, down[k])
			}
			binary.BigEndian.PutUint16(p[at:], uint16(k))
			down = down[k:]
		}
		parts = append(parts, p)
		if len(vips) == 0 && len(down) == 0 || len(parts) == 255 {
			break
		}
	}
	for i, p := range parts {
		p[3], p[4] = byte(i), byte(len(parts))
		if v >= 4 {
			parts[i] = keys.SealWith(p, exts)
		}
	}
	return parts
}

// decodeHeartbeat parses one part; a message that is not a heartbeat or
// is damaged is an error. What it accepts is exactly what encode writes.
func decodeHeartbeat(b []byte) (heartbeat, error) {
	var hb heartbeat
	if len(b) < hbHeader || b[0] != hbMagic {
		return hb, errors.New("not a heartbeat")
	}
	if len(b) > hbMaxBytes {
		return hb, fmt.Errorf("heartbeat of %d bytes, at most %d", len(b), hbMaxBytes)
	}
	known := byte(flagReady | flagLeaving | flagHealth)
	switch b[1] {
	case hbVersionV3:
	case hbVersion:
		known |= flagSigned
	default:
		return hb, versionError(b[1])
	}
	if b[2]&^known != 0 {
		return hb, fmt.Errorf("heartbeat with unknown flags %#x", b[2])
	}
	hb.Version = b[1]
	if b[1] >= 4 {
		var err error
		var exts []byte
		if b, exts, hb.signed, hb.sig, err = identity.OpenWith(b, b[2]&flagSigned != 0, hbHeader); err != nil {
			return hb, err
		}
		if hb.RestartHold, err = restartHoldOf(exts); err != nil {
			return hb, err
		}
		hb.readExtensions(exts)
	}
	hb.Ready, hb.Leaving, hb.SharesHealth = b[2]&flagReady != 0, b[2]&flagLeaving != 0, b[2]&flagHealth != 0
	hb.Part, hb.Parts = int(b[3]), int(b[4])
	if hb.Parts == 0 || hb.Part >= hb.Parts {
		return hb, fmt.Errorf("heartbeat part %d of %d", hb.Part, hb.Parts)
	}
	hb.Incarnation = binary.BigEndian.Uint64(b[5:])
	hb.Seq = binary.BigEndian.Uint64(b[13:])
	hb.Priority = int(int32(binary.BigEndian.Uint32(b[21:])))
	rest := b[hbHeader:]
	str := func() (string, bool) {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return "", false
		}
		s := string(rest[1 : 1+int(rest[0])])
		rest = rest[1+int(rest[0]):]
		return s, true
	}
	var ok1, ok2 bool
	hb.Name, ok1 = str()
	hb.Addr, ok2 = str()
	if !ok1 || !ok2 || len(rest) < 1 {
		return hb, errShort
	}
	if hb.Name == "" {
		return hb, errors.New("heartbeat without a name")
	}
	k := int(rest[0])
	if k > maxHeard {
		return hb, fmt.Errorf("heartbeat echoes %d incarnations, at most %d", k, maxHeard)
	}
	if len(rest) < 1+8*k+2 {
		return hb, errShort
	}
	for i := range k {
		hb.Heard = append(hb.Heard, binary.BigEndian.Uint64(rest[1+8*i:]))
	}
	var err error
	hb.VIPs, rest, err = decodeClaims(rest[1+8*k:])
	if err == nil && hb.SharesHealth {
		hb.Down, rest, err = decodeDown(rest)
	}
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes after the heartbeat", len(rest))
	}
	return hb, err
}

// decodeDown parses a part's health section: a count, then as many
// HealthIDs. It returns what follows.
func decodeDown(b []byte) ([]uint64, []byte, error) {
	if len(b) < 2 {
		return nil, nil, errShort
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n > len(b)/8 {
		return nil, nil, errShort
	}
	down := make([]uint64, n)
	for i := range down {
		down[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	return down, b[8*n:], nil
}

// decodeClaims parses a heartbeat's VIP claims: a count, then the claims.
// It returns what follows them.
func decodeClaims(b []byte) ([]vipClaim, []byte, error) {
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	// Each claim takes at least 5 bytes: a count beyond what is there is
	// a lie, not a reason to allocate.
	if n > len(b)/5 {
		return nil, nil, errShort
	}
	claims := make([]vipClaim, 0, n)
	for range n {
		if len(b) < 1 {
			return nil, nil, errShort
		}
		if b[0]&^(claimHeld|claimV6) != 0 {
			return nil, nil, fmt.Errorf("heartbeat claim with unknown flags %#x", b[0])
		}
		size := 4
		if b[0]&claimV6 != 0 {
			size = 16
		}
		if len(b) < 1+size {
			return nil, nil, errShort
		}
		a, _ := netip.AddrFromSlice(b[1 : 1+size])
		claims = append(claims, vipClaim{VIP: a, Held: b[0]&claimHeld != 0})
		b = b[1+size:]
	}
	return claims, b, nil
}
