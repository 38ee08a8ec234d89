package connsync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The kernel's sync protocol, version 1 (net/netfilter/ipvs/ip_vs_sync.c,
// unchanged since Linux 2.6.39). A datagram is a struct ip_vs_sync_mesg
// header followed by nr_conns records; a record is struct ip_vs_sync_v4 or
// ip_vs_sync_v6 followed by optional parameters, and the next record starts
// at the next multiple of 4 bytes.
const (
	syncHeaderLen = 8 // struct ip_vs_sync_mesg
	syncVersion   = 1 // SYNC_PROTO_VER

	recLenV4 = 36 // sizeof(struct ip_vs_sync_v4)
	recLenV6 = 72 // sizeof(struct ip_vs_sync_v6)

	stypeInet6 = 1 // STYPE_F_INET6 in the type byte
	sverShift  = 12
	sverMask   = 0x0fff

	optSeqData = 1    // IPVS_OPT_SEQ_DATA
	optPEData  = 2    // IPVS_OPT_PE_DATA
	optPEName  = 3    // IPVS_OPT_PE_NAME
	optFParam  = 0x40 // IPVS_OPT_F_PARAM: the kernel skips an unknown option with this bit
	seqOptLen  = 24   // struct ip_vs_sync_conn_options: two struct ip_vs_seq
	peNameMax  = 16   // IP_VS_PENAME_MAXLEN

	connFTemplate = 0x1000 // IP_VS_CONN_F_TEMPLATE: a persistence template, not a connection

	// Offsets in a record.
	offProto   = 1
	offVerSize = 2
	offFlags   = 4
	offState   = 8
	offCport   = 10
	offVport   = 12
	offDport   = 14
	offFWMark  = 16
	offTimeout = 20
	offAddrs   = 24 // caddr, vaddr, daddr: 4 or 16 bytes each

	// maxRecordLen is the largest record the relay carries: one must fit in
	// a relay message. The kernel's largest is 373 bytes (IPv6 + seq + 255
	// bytes of PE data + a 16-byte PE name).
	maxRecordLen = maxMessageLen - maxHeaderLen
)

// IP protocol numbers and the number of IPVS states of each
// (IP_VS_TCP_S_LAST, IP_VS_UDP_S_LAST, IP_VS_SCTP_S_LAST in
// include/net/ip_vs.h). The backup daemon refuses a connection whose state
// is out of range.
const (
	protoIP   = 0 // fwmark persistence templates (ip_vs_sched_persist)
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

var protoStates = map[uint8]uint16{protoTCP: 11, protoUDP: 1, protoSCTP: 14}

// errInvalid is wrapped by every validation error, so callers can count
// them apart from other failures.
var errInvalid = errors.New("invalid")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// rec is one validated record as the kernel encodes it, without padding.
type rec []byte

func (r rec) v6() bool        { return r[0]&stypeInet6 != 0 }
func (r rec) protocol() uint8 { return r[offProto] }
func (r rec) flags() uint32   { return binary.BigEndian.Uint32(r[offFlags:]) }
func (r rec) vport() uint16   { return binary.BigEndian.Uint16(r[offVport:]) }

// fwmark is the packet mark the connection was scheduled with: a mark
// service's mark, or whatever mark the packet had.
func (r rec) fwmark() uint32 { return binary.BigEndian.Uint32(r[offFWMark:]) }

// timeout is the connection's remaining life in seconds when the master
// sent it; 0 makes the backup use its own default for the state.
func (r rec) timeout() uint32 { return binary.BigEndian.Uint32(r[offTimeout:]) }

func (r rec) setTimeout(s uint32) { binary.BigEndian.PutUint32(r[offTimeout:], s) }

func (r rec) addrLen() int {
	if r.v6() {
		return 16
	}
	return 4
}

// vaddr is the virtual address (the VIP; a fwmark template carries the mark
// here instead).
func (r rec) vaddr() netip.Addr {
	n := r.addrLen()
	a, _ := netip.AddrFromSlice(r[offAddrs+n : offAddrs+2*n])
	return a
}

// dest is the real server's address and port.
func (r rec) dest() netip.AddrPort {
	n := r.addrLen()
	a, _ := netip.AddrFromSlice(r[offAddrs+2*n : offAddrs+3*n])
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(r[offDport:]))
}

// connKey identifies a connection as the kernel's conn lookup does
// (ip_vs_conn_in_get: af, protocol, caddr, cport, vaddr, vport); templates
// live in another namespace (ip_vs_ct_in_get) and, with a persistence
// engine, are told apart by its data.
type connKey struct {
	addrs        [32]byte // caddr then vaddr, 4 or 16 bytes each
	cport, vport uint16
	proto        uint8
	v6, template bool
	pe           string
}

func (r rec) key() connKey {
	n := r.addrLen()
	k := connKey{
		cport:    binary.BigEndian.Uint16(r[offCport:]),
		vport:    r.vport(),
		proto:    r.protocol(),
		v6:       r.v6(),
		template: r.flags()&connFTemplate != 0,
	}
	copy(k.addrs[:], r[offAddrs:offAddrs+2*n])
	for p := offAddrs + 3*n; p+2 <= len(r); p += 2 + int(r[p+1]) {
		if r[p]&^optFParam == optPEData {
			k.pe = string(r[p+2 : p+2+int(r[p+1])])
		}
	}
	return k
}

// parseDatagram validates a datagram from the master daemon and returns its
// records, which alias b.
func parseDatagram(b []byte) (syncID uint8, recs []rec, err error) {
	if len(b) < syncHeaderLen {
		return 0, nil, invalidf("datagram of %d bytes is shorter than the header", len(b))
	}
	if size := int(binary.BigEndian.Uint16(b[2:])); size != len(b) {
		return 0, nil, invalidf("header says %d bytes, datagram has %d", size, len(b))
	}
	// A version 0 datagram (sysctl sync_version=0) starts with its count
	// where version 1 has a zero byte.
	if b[0] != 0 || b[5] != syncVersion || b[6] != 0 || b[7] != 0 {
		return 0, nil, invalidf("not a version 1 header (% x)", b[:syncHeaderLen])
	}
	recs, err = parseRecords(b[syncHeaderLen:], int(b[4]), nil)
	return b[1], recs, err
}

// parseRecords validates n records packed as the kernel packs them and
// appends them to recs. The records must fill body exactly: the kernel
// pads between records, not after the last one.
func parseRecords(body []byte, n int, recs []rec) ([]rec, error) {
	p := 0
	for i := range n {
		if i > 0 {
			pad := (4 - p%4) % 4
			if p+pad > len(body) {
				return nil, invalidf("record %d at byte %d: truncated padding", i, p)
			}
			for _, c := range body[p : p+pad] {
				if c != 0 {
					return nil, invalidf("record %d at byte %d: non-zero padding", i, p)
				}
			}
			p += pad
		}
		if len(body)-p < 4 {
			return nil, invalidf("record %d at byte %d: truncated", i, p)
		}
		vs := binary.BigEndian.Uint16(body[p+offVerSize:])
		size := int(vs & sverMask)
		if v := vs >> sverShift; v != 0 {
			return nil, invalidf("record %d at byte %d: record version %d", i, p, v)
		}
		if size > len(body)-p {
			return nil, invalidf("record %d at byte %d: size %d past the end (%d bytes)", i, p, size, len(body))
		}
		r := rec(body[p : p+size])
		if err := checkRecord(r); err != nil {
			return nil, fmt.Errorf("record %d at byte %d: %w", i, p, err)
		}
		recs = append(recs, r)
		p += size
	}
	if p != len(body) {
		return nil, invalidf("%d bytes after the last of %d records", len(body)-p, n)
	}
	return recs, nil
}

// checkRecord applies the backup daemon's checks (ip_vs_proc_sync_conn)
// to one record, a little more strictly: what the kernel would skip is
// refused too, so the relay never carries what the backup drops.
func checkRecord(r rec) error {
	if len(r) > maxRecordLen || len(r) < recLenV4 {
		return invalidf("size %d is not within %d..%d", len(r), recLenV4, maxRecordLen)
	}
	base := recLenV4
	switch r[0] {
	case 0:
	case stypeInet6:
		base = recLenV6
	default:
		return invalidf("type %#x", r[0])
	}
	if len(r) < base {
		return invalidf("size %d is below the %d of its address family", len(r), base)
	}
	flags := r.flags()
	state := binary.BigEndian.Uint16(r[offState:])
	proto := r.protocol()
	if flags&connFTemplate != 0 {
		// The kernel does not check a template's state.
		if _, ok := protoStates[proto]; !ok && proto != protoIP {
			return invalidf("template of protocol %d", proto)
		}
	} else {
		states, ok := protoStates[proto]
		if !ok {
			return invalidf("protocol %d", proto)
		}
		if state >= states {
			return invalidf("state %d of protocol %d", state, proto)
		}
	}
	var seen [4]bool
	for p := base; p < len(r); {
		if len(r)-p < 2 {
			return invalidf("option at byte %d: truncated", p)
		}
		typ, n := r[p], int(r[p+1])
		if n == 0 || n > len(r)-p-2 {
			return invalidf("option %d at byte %d: length %d", typ, p, n)
		}
		switch t := typ &^ optFParam; t {
		case optSeqData, optPEData, optPEName:
			if seen[t] {
				return invalidf("option %d twice", t)
			}
			seen[t] = true
			if t == optSeqData && n != seqOptLen {
				return invalidf("sequence option of %d bytes", n)
			}
			if t == optPEName && n > peNameMax {
				return invalidf("persistence engine name of %d bytes", n)
			}
		default:
			if typ&optFParam == 0 {
				return invalidf("unknown mandatory option %d", typ)
			}
		}
		p += 2 + n
	}
	if seen[optPEData] && !seen[optPEName] {
		return invalidf("persistence engine data without a name")
	}
	return nil
}

// appendRecord appends r to a run of records, padding it to 4 bytes as the
// kernel does, and returns the extended run and r's copy in it.
func appendRecord(body []byte, r rec) ([]byte, rec) {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	start := len(body)
	body = append(body, r...)
	return body, rec(body[start:])
}

// paddedLen is how much appending r to body would add.
func paddedLen(body []byte, r rec) int {
	return (4-len(body)%4)%4 + len(r)
}

// appendDatagram appends a version 1 datagram carrying n records (body as
// built by appendRecord) with the given sync ID.
func appendDatagram(dst []byte, syncID uint8, n int, body []byte) []byte {
	dst = append(dst, 0, syncID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(syncHeaderLen+len(body)))
	dst = append(dst, byte(n), syncVersion, 0, 0)
	return append(dst, body...)
}
