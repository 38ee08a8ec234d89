package toa

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// frame builds an Ethernet frame with an IP packet carrying a TCP segment
// with correct checksums; pad adds Ethernet padding after the IP packet.
func frame(src, dst netip.AddrPort, flags byte, options, payload []byte, pad int) []byte {
	seg := make([]byte, 20+len(options)+len(payload))
	binary.BigEndian.PutUint16(seg[0:], src.Port())
	binary.BigEndian.PutUint16(seg[2:], dst.Port())
	binary.BigEndian.PutUint32(seg[4:], 1000)
	seg[12] = byte((20+len(options))/4) << 4
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], 64240)
	copy(seg[20:], options)
	copy(seg[20+len(options):], payload)
	binary.BigEndian.PutUint16(seg[16:], tcpChecksum(src.Addr(), dst.Addr(), seg))
	eth := make([]byte, 14)
	var ip []byte
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:], unix.ETH_P_IP)
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(seg)))
		ip[8], ip[9] = 64, unix.IPPROTO_TCP
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	} else {
		binary.BigEndian.PutUint16(eth[12:], unix.ETH_P_IPV6)
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(seg)))
		ip[6], ip[7] = unix.IPPROTO_TCP, 64
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	return append(append(append(eth, ip...), seg...), make([]byte, pad)...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// parsed is what a test reads back from the program's output frame.
type parsed struct {
	options, payload []byte
	flags            byte
	checksumsOK      bool
	end              int // where the IP packet ends in the frame
}

func parseFrame(t *testing.T, f []byte) parsed {
	t.Helper()
	ip := f[14:]
	var src, dst netip.Addr
	var seg []byte
	var end int
	ok := true
	if binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IP {
		n := int(binary.BigEndian.Uint16(ip[2:]))
		if n > len(ip) {
			t.Fatalf("IPv4 total length %d beyond the frame's %d bytes", n, len(ip))
		}
		ok = ipChecksum(ip[:20]) == 0
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		seg = ip[20:n]
		end = 14 + n
	} else {
		n := 40 + int(binary.BigEndian.Uint16(ip[4:]))
		if n > len(ip) {
			t.Fatalf("IPv6 payload length %d beyond the frame's %d bytes", n-40, len(ip))
		}
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		seg = ip[40:n]
		end = 14 + n
	}
	hl := int(seg[12]>>4) * 4
	// A segment with its checksum in place sums to zero.
	ok = ok && tcpChecksum(src, dst, seg) == 0
	return parsed{options: seg[20:hl], payload: seg[hl:], flags: seg[13], checksumsOK: ok, end: end}
}

// TestDirectorProgramRewrites runs the director's program on frames the
// test builds (BPF_PROG_TEST_RUN) and checks every byte it changes and every
// checksum it fixes, without a network.
func TestDirectorProgramRewrites(t *testing.T) {
	requireRoot(t)
	spec, err := loadDirector()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var objs directorObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	vip4, vip6 := netip.MustParseAddrPort("192.0.2.1:80"), netip.MustParseAddrPort("[2001:db8::1]:80")
	keys, _ := vipKeys([]netip.AddrPort{vip4, vip6})
	if err := syncSet(objs.ToaServices, keys); err != nil {
		t.Fatal(err)
	}
	c4, c6 := netip.MustParseAddrPort("198.51.100.7:51234"), netip.MustParseAddrPort("[2001:db8:c::7]:51234")
	mss := []byte{2, 4, 5, 0xb4}
	forged4 := Option(netip.MustParseAddrPort("203.0.113.9:1"))
	nops := func(n int) []byte { return bytes.Repeat([]byte{1}, n) }
	full := append(append([]byte{}, mss...), nops(36)...)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	const syn, ack, psh = 0x02, 0x10, 0x08

	for _, tc := range []struct {
		name        string
		in          []byte
		wantOptions []byte // nil: the frame must come out unchanged
		wantPayload string
		stat        func(DirectorStats) uint64
	}{
		{"IPv4 SYN", frame(c4, vip4, syn, mss, nil, 0), cat(mss, Option(c4)), "", func(s DirectorStats) uint64 { return s.Added }},
		{"IPv6 SYN", frame(c6, vip6, syn, mss, nil, 0), cat(mss, Option(c6)), "", func(s DirectorStats) uint64 { return s.Added }},
		{"IPv4 SYN without options, Ethernet padding", frame(c4, vip4, syn, nil, nil, 6), Option(c4), "", func(s DirectorStats) uint64 { return s.Added }},
		{"IPv4 SYN with a forged option", frame(c4, vip4, syn, cat(mss, forged4), nil, 0), cat(mss, nops(8), Option(c4)), "", func(s DirectorStats) uint64 { return s.Stripped }},
		{"ACK with a forged option", frame(c4, vip4, ack|psh, forged4, []byte("GET /"), 0), nops(8), "GET /", func(s DirectorStats) uint64 { return s.Stripped }},
		{"SYN with 40 bytes of options", frame(c4, vip4, syn, full, nil, 0), nil, "", func(s DirectorStats) uint64 { return s.NoRoom }},
		{"SYN with data", frame(c4, vip4, syn, mss, []byte("fast open"), 0), nil, "", func(s DirectorStats) uint64 { return s.Unsupported }},
		{"SYN to another port", frame(c4, netip.AddrPortFrom(vip4.Addr(), 81), syn, cat(mss, forged4), nil, 0), nil, "", nil},
		{"SYN-ACK from a VIP", frame(vip4, c4, syn|ack, mss, nil, 0), nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := (&KernelDirector{objs: objs}).Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			opts := &ebpf.RunOptions{Data: tc.in, DataOut: make([]byte, len(tc.in)+64)}
			ret, err := objs.ToaDirector.Run(opts)
			if err != nil {
				t.Fatal(err)
			}
			out := opts.DataOut // cut to the length the program left
			if ret != 0 {       // TC_ACT_OK
				t.Fatalf("verdict %d, want TC_ACT_OK", ret)
			}
			after, _ := (&KernelDirector{objs: objs}).Stats(t.Context())
			if tc.stat != nil && tc.stat(after) != tc.stat(before)+1 {
				t.Errorf("stats %+v after %+v: want the case counted", after, before)
			}
			if tc.wantOptions == nil {
				if !bytes.Equal(out, tc.in) {
					t.Errorf("the frame changed:\n in %x\nout %x", tc.in, out)
				}
				return
			}
			p := parseFrame(t, out)
			if len(out) != p.end {
				t.Errorf("the frame is %d bytes, the IP packet ends at %d: padding left or data lost", len(out), p.end)
			}
			if !bytes.Equal(p.options, tc.wantOptions) {
				t.Errorf("options %v, want %v", p.options, tc.wantOptions)
			}
			if string(p.payload) != tc.wantPayload {
				t.Errorf("payload %q, want %q", p.payload, tc.wantPayload)
			}
			if !p.checksumsOK {
				t.Error("a checksum is wrong after the rewrite")
			}
			if got, ok := ParseOption(p.options); p.flags&ack == 0 && (!ok || got.Port() != 51234) {
				t.Errorf("ParseOption = %v, %v: want the client's address", got, ok)
			}
		})
	}
}

// BenchmarkDirectorProgram is the program's own cost per packet
// (BPF_PROG_TEST_RUN, so without the stack around it): a data packet to a
// VIP, whose options are walked, and a packet to another address. A SYN has
// no case: the test run hands the same buffer to every repetition, so from
// the second on it would measure a SYN that already carries the option.
func BenchmarkDirectorProgram(b *testing.B) {
	if unix.Geteuid() != 0 {
		b.Skip("needs root")
	}
	spec, err := loadDirector()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var objs directorObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		b.Fatal(err)
	}
	defer objs.Close()
	vip := netip.MustParseAddrPort("192.0.2.1:80")
	keys, _ := vipKeys([]netip.AddrPort{vip})
	if err := syncSet(objs.ToaServices, keys); err != nil {
		b.Fatal(err)
	}
	client := netip.MustParseAddrPort("198.51.100.7:51234")
	ts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, bc := range []struct {
		name string
		in   []byte
	}{
		{"data to a VIP", frame(client, vip, 0x18, ts, make([]byte, 1400), 0)},
		{"other traffic", frame(client, netip.MustParseAddrPort("192.0.2.2:80"), 0x18, ts, make([]byte, 1400), 0)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ret, per, err := objs.ToaDirector.Benchmark(bc.in, b.N, b.ResetTimer)
			if err != nil || ret != 0 {
				b.Fatalf("verdict %d, %v", ret, err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
		})
	}
}
