package ipvs

// The generic netlink wire format of the IPVS sync-daemon commands.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Generic netlink numbers of the sync daemon (include/uapi/linux/ip_vs.h).
const (
	genlCmdNewDaemon = 9  // IPVS_CMD_NEW_DAEMON; also the command of GET_DAEMON's replies
	genlCmdDelDaemon = 10 // IPVS_CMD_DEL_DAEMON
	genlCmdGetDaemon = 11 // IPVS_CMD_GET_DAEMON (dump only)
	genlAttrDaemon   = 3  // IPVS_CMD_ATTR_DAEMON, a nest of:
	daemonAttrState  = 1  // u32
	daemonAttrIfn    = 2  // NUL-terminated, at most 15 bytes
	daemonAttrSyncID = 3  // u32
	daemonAttrMaxLen = 4  // u16
	daemonAttrGroup  = 5  // IPv4 address, network order
	daemonAttrGroup6 = 6  // IPv6 address
	daemonAttrPort   = 7  // u16 in host order: the kernel applies htons itself
	daemonAttrTTL    = 8  // u8
	nlaTypeMask      = 0x3fff
)

// genlTimeout bounds one request when ctx has no earlier deadline, so a
// lost reply fails instead of hanging the agent.
const genlTimeout = 10 * time.Second

// genlConn is one generic netlink socket in the Kernel's namespace. Daemon
// changes are rare, so each call opens its own: no state to share with the
// moby handle, and the namespace is entered only while the socket is made.
type genlConn struct {
	s      *nl.NetlinkSocket
	family uint16
}

func (k *Kernel) genl(ctx context.Context) (*genlConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Family IDs are global, so the lookup may run in any namespace.
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		return nil, fmt.Errorf("%w: no IPVS generic netlink family: %v", ErrNotAvailable, err)
	}
	s, err := nl.GetNetlinkSocketAt(k.ns, netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening generic netlink socket: %w", err)
	}
	timeout := genlTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	_ = s.SetSendTimeout(&tv) // both only store the value
	_ = s.SetReceiveTimeout(&tv)
	return &genlConn{s: s, family: fam.ID}, nil
}

// exec sends one IPVS command and collects the payloads of its replies
// (generic netlink header included) until the ack or the end of the dump.
func (c *genlConn) exec(cmd uint8, flags int, attrs ...nl.NetlinkRequestData) ([][]byte, error) {
	req := newGenlRequest(c.family, cmd, flags, attrs...)
	if err := c.s.Send(req); err != nil {
		return nil, fmt.Errorf("sending netlink request: %w", err)
	}
	pid, err := c.s.GetPid()
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		msgs, from, err := c.s.Receive()
		if errors.Is(err, unix.EAGAIN) {
			return nil, fmt.Errorf("no netlink answer from the kernel in time: %w", err)
		} else if err != nil {
			return nil, fmt.Errorf("receiving netlink answer: %w", err)
		}
		if from.Pid != 0 { // not from the kernel
			continue
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq || m.Header.Pid != pid {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				// Both carry an int32 errno (negated); 0 is the ack or a clean end.
				if len(m.Data) >= 4 {
					if e := -int32(nl.NativeEndian().Uint32(m.Data)); e != 0 {
						return nil, syscall.Errno(e)
					}
				}
				return out, nil
			}
			out = append(out, m.Data)
		}
	}
}

func newGenlRequest(family uint16, cmd uint8, flags int, attrs ...nl.NetlinkRequestData) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(int(family), flags|unix.NLM_F_ACK)
	req.AddData(genlHeader{cmd, 1}) // IPVS_GENL_VERSION
	for _, a := range attrs {
		req.AddData(a)
	}
	return req
}

// genlHeader is struct genlmsghdr: command, version, 2 reserved bytes. (The
// request's RawData would go after the attributes, and nl.Genlmsg has no
// reserved field.)
type genlHeader [2]byte

func (h genlHeader) Len() int          { return 4 }
func (h genlHeader) Serialize() []byte { return []byte{h[0], h[1], 0, 0} }

func (c *genlConn) daemons() ([]Daemon, error) {
	msgs, err := c.exec(genlCmdGetDaemon, unix.NLM_F_DUMP)
	if err != nil {
		return nil, err
	}
	return parseDaemons(msgs)
}

// encodeDaemon builds the IPVS_CMD_ATTR_DAEMON nest; DEL_DAEMON needs only
// the state. Zero optional fields are left out so the kernel's defaults apply.
func encodeDaemon(d Daemon, full bool) *nl.RtAttr {
	n := nl.NewRtAttr(genlAttrDaemon, nil)
	n.AddRtAttr(daemonAttrState, nl.Uint32Attr(uint32(d.State)))
	if !full {
		return n
	}
	n.AddRtAttr(daemonAttrIfn, nl.ZeroTerminated(d.Interface))
	n.AddRtAttr(daemonAttrSyncID, nl.Uint32Attr(uint32(d.SyncID)))
	if d.MaxLen != 0 {
		n.AddRtAttr(daemonAttrMaxLen, nl.Uint16Attr(d.MaxLen))
	}
	if g := d.Group.Unmap(); g.Is4() {
		a := g.As4()
		n.AddRtAttr(daemonAttrGroup, a[:])
	} else if g.Is6() {
		a := g.As16()
		n.AddRtAttr(daemonAttrGroup6, a[:])
	}
	if d.Port != 0 {
		n.AddRtAttr(daemonAttrPort, nl.Uint16Attr(d.Port))
	}
	if d.TTL != 0 {
		n.AddRtAttr(daemonAttrTTL, nl.Uint8Attr(d.TTL))
	}
	return n
}

// parseDaemons reads GET_DAEMON replies: one message per running daemon.
func parseDaemons(msgs [][]byte) ([]Daemon, error) {
	nests, err := genlNests(msgs, genlAttrDaemon)
	if err != nil {
		return nil, fmt.Errorf("parsing daemon reply: %w", err)
	}
	out := make([]Daemon, 0, len(nests))
	for _, n := range nests {
		d, err := parseDaemon(n)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// genlNests returns the payloads of the top-level attributes of type typ
// in generic netlink replies (generic netlink header first).
func genlNests(msgs [][]byte, typ uint16) ([][]byte, error) {
	var out [][]byte
	for _, m := range msgs {
		if len(m) < 4 {
			return nil, fmt.Errorf("short generic netlink message (%d bytes)", len(m))
		}
		attrs, err := nl.ParseRouteAttr(m[4:])
		if err != nil {
			return nil, err
		}
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == typ {
				out = append(out, a.Value)
			}
		}
	}
	return out, nil
}

// daemonAttrSize is the payload size of the fixed-size daemon attributes.
var daemonAttrSize = map[uint16]int{daemonAttrState: 4, daemonAttrSyncID: 4, daemonAttrMaxLen: 2,
	daemonAttrGroup: 4, daemonAttrGroup6: 16, daemonAttrPort: 2, daemonAttrTTL: 1}

func parseDaemon(b []byte) (Daemon, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return Daemon{}, fmt.Errorf("parsing daemon attributes: %w", err)
	}
	var d Daemon
	ne := nl.NativeEndian()
	for _, a := range attrs {
		t, v := a.Attr.Type&nlaTypeMask, a.Value
		if size := daemonAttrSize[t]; len(v) < size {
			return Daemon{}, fmt.Errorf("daemon attribute %d has %d bytes, want %d", t, len(v), daemonAttrSize[t])
		}
		switch t {
		case daemonAttrState:
			d.State = DaemonState(ne.Uint32(v))
		case daemonAttrIfn:
			name, _, _ := bytes.Cut(v, []byte{0})
			d.Interface = string(name)
		case daemonAttrSyncID:
			d.SyncID = uint8(ne.Uint32(v)) // messages carry 8 bits of it
		case daemonAttrMaxLen:
			d.MaxLen = ne.Uint16(v)
		case daemonAttrGroup:
			d.Group = netip.AddrFrom4([4]byte(v[:4]))
		case daemonAttrGroup6:
			d.Group = netip.AddrFrom16([16]byte(v[:16]))
		case daemonAttrPort:
			d.Port = ne.Uint16(v)
		case daemonAttrTTL:
			d.TTL = v[0]
		}
	}
	return d, nil
}
