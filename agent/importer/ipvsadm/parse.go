// Package ipvsadm reads an IPVS table — the text of `ipvsadm -Sn` (also
// what `ipvsadm -R` restores), or what the kernel holds, read by package
// ipvs — and converts its services into lvsd service files (convert.go).
// It is pure: the caller reads the file or the kernel.
package ipvsadm

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// Entry is one IPVS service with its destinations, and where the text
// named it (Line 0: read from the kernel).
type Entry struct {
	Service      spec.Service
	Destinations []spec.Destination
	Line         int
	// DestLines are the lines of the -a commands, by destination.
	DestLines map[spec.DestinationKey]int
	// OnePacket, SchedFlags: what the service asked for that spec.Flags
	// keeps too, named as ipvsadm names them, for the report.
	SchedFlags []string
	PE         string // persistence engine
}

// Table is an IPVS table in the order the services were given.
type Table struct {
	Entries []*Entry
}

// Bounds of the text read: a 64 MiB file, 1,000,000 lines (a 100,000
// service table with 9 destinations each).
const (
	MaxTextSize = 64 << 20
	MaxLines    = 1_000_000
)

// Error is a problem of the text at a line.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Parse reads the text of `ipvsadm -Sn` (or a file of -A and -a
// commands for `ipvsadm -R`), named file in errors. Comments (#) and blank
// lines are skipped.
func Parse(file string, data []byte) (*Table, error) {
	if len(data) > MaxTextSize {
		return nil, &Error{File: file, Line: 1, Msg: fmt.Sprintf("is larger than the %d MiB read", MaxTextSize>>20)}
	}
	t := &Table{}
	byKey := map[spec.ServiceKey]*Entry{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	num := 0
	for sc.Scan() {
		num++
		if num > MaxLines {
			return nil, &Error{File: file, Line: num, Msg: fmt.Sprintf("more than %d lines", MaxLines)}
		}
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		words := strings.Fields(text)
		if len(words) == 0 {
			continue
		}
		if err := t.line(byKey, words, num); err != nil {
			return nil, &Error{File: file, Line: num, Msg: err.Error()}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{File: file, Line: num + 1, Msg: "a line longer than 64 KiB"}
	}
	return t, nil
}

// options is one line's flags.
type options struct {
	command     string // "-A" or "-a"
	key         spec.ServiceKey
	keySet      bool
	ipv6        bool
	real        netip.AddrPort
	realSet     bool
	sched       string
	persistent  bool
	timeout     uint32
	netmask     string
	flags       []string
	ops         bool
	pe          string
	forwarding  spec.Forwarding
	fwdSet      bool
	weight      int
	weightSet   bool
	upper       uint32
	lower       uint32
	tunType     string
	tunPort     uint16
	tunChecksum string
}

func (t *Table) line(byKey map[spec.ServiceKey]*Entry, words []string, num int) error {
	o, err := parseOptions(words)
	if err != nil {
		return err
	}
	if !o.keySet {
		return fmt.Errorf("names no service: give -t, -u, --sctp-service ADDRESS:PORT or -f MARK")
	}
	if o.key.FWMark != 0 {
		o.key.IPv6 = o.ipv6
	}
	switch o.command {
	case "-A":
		if _, dup := byKey[o.key]; dup {
			return fmt.Errorf("service %s is added twice", o.key)
		}
		e, err := o.service()
		if err != nil {
			return err
		}
		e.Line = num
		byKey[o.key] = e
		t.Entries = append(t.Entries, e)
	case "-a":
		e := byKey[o.key]
		if e == nil {
			return fmt.Errorf("a real server of service %s, which no -A line before adds", o.key)
		}
		d, err := o.destination(e.Service)
		if err != nil {
			return err
		}
		for _, have := range e.Destinations {
			if have.DestinationKey == d.DestinationKey {
				return fmt.Errorf("real server %s is added twice to %s", d.DestinationKey, o.key)
			}
		}
		e.Destinations = append(e.Destinations, d)
		if e.DestLines == nil {
			e.DestLines = map[spec.DestinationKey]int{}
		}
		e.DestLines[d.DestinationKey] = num
	default:
		return fmt.Errorf("%q is not -A (add a service) or -a (add a real server)", o.command)
	}
	return nil
}

func parseOptions(words []string) (options, error) {
	o := options{command: words[0], weight: 1}
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(words) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		*i++
		return words[*i], nil
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		flag, inline, hasInline := strings.Cut(w, "=")
		if !strings.HasPrefix(w, "--") || !hasInline {
			flag, inline = w, ""
		}
		value := func() (string, error) {
			if hasInline && strings.HasPrefix(w, "--") {
				return inline, nil
			}
			return next(&i, flag)
		}
		var err error
		var v string
		switch flag {
		case "-t", "--tcp-service", "-u", "--udp-service", "--sctp-service":
			if v, err = value(); err == nil {
				proto := l4.TCP
				switch flag {
				case "-u", "--udp-service":
					proto = l4.UDP
				case "--sctp-service":
					proto = l4.SCTP
				}
				var ap netip.AddrPort
				ap, err = addrPort(v)
				o.key = spec.ServiceKey{Protocol: proto, Addr: ap.Addr(), Port: ap.Port(), IPv6: ap.Addr().Is6()}
				o.keySet = true
			}
		case "-f", "--fwmark-service":
			if v, err = value(); err == nil {
				var m uint64
				m, err = strconv.ParseUint(v, 0, 32)
				if err != nil || m == 0 {
					err = fmt.Errorf("fwmark %q is not a mark (1-4294967295)", v)
				}
				o.key = spec.ServiceKey{Protocol: l4.Any, FWMark: uint32(m)}
				o.keySet = true
			}
		case "-6", "--ipv6":
			o.ipv6 = true
		case "-s", "--scheduler":
			o.sched, err = value()
		case "-p", "--persistent":
			o.persistent, o.timeout = true, 300
			if i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				i++
				var n uint64
				n, err = strconv.ParseUint(words[i], 10, 32)
				if err != nil || n == 0 {
					err = fmt.Errorf("persistence timeout %q is not a number of seconds", words[i])
				}
				o.timeout = uint32(n)
			}
		case "-M", "--netmask":
			o.netmask, err = value()
		case "-b", "--sched-flags":
			if v, err = value(); err == nil {
				o.flags = strings.Split(v, ",")
			}
		case "-o", "--ops":
			o.ops = true
		case "--pe":
			o.pe, err = value()
		case "-r", "--real-server":
			if v, err = value(); err == nil {
				o.real, err = addrPort(v)
				o.realSet = true
			}
		case "-g", "--gatewaying":
			o.forwarding, o.fwdSet = spec.DirectRoute, true
		case "-m", "--masquerading":
			o.forwarding, o.fwdSet = spec.Masquerade, true
		case "-i", "--ipip":
			o.forwarding, o.fwdSet = spec.Tunnel, true
		case "-w", "--weight":
			if v, err = value(); err == nil {
				o.weight, err = strconv.Atoi(v)
				if err != nil || o.weight < 0 {
					err = fmt.Errorf("weight %q is not a whole number of at least 0", v)
				}
				o.weightSet = true
			}
		case "-x", "--u-threshold", "-y", "--l-threshold":
			if v, err = value(); err == nil {
				var n uint64
				n, err = strconv.ParseUint(v, 10, 32)
				if err != nil {
					err = fmt.Errorf("threshold %q is not a connection count", v)
				}
				if flag == "-x" || flag == "--u-threshold" {
					o.upper = uint32(n)
				} else {
					o.lower = uint32(n)
				}
			}
		case "--tun-type":
			o.tunType, err = value()
		case "--tun-port":
			if v, err = value(); err == nil {
				var n uint64
				n, err = strconv.ParseUint(v, 10, 16)
				if err != nil || n == 0 {
					err = fmt.Errorf("tunnel port %q is not a port", v)
				}
				o.tunPort = uint16(n)
			}
		case "--tun-nocsum", "--tun-csum", "--tun-remcsum":
			o.tunChecksum = flag
		default:
			err = fmt.Errorf("%q is not an option of ipvsadm's -A or -a", w)
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// addrPort reads ADDRESS:PORT, [V6]:PORT, or an address alone (port 0).
func addrPort(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 0), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%q is not an address with a port, like 10.0.0.1:80 or [2001:db8::1]:80 (ipvsadm -S without -n prints names: use -Sn)", s)
}

// service makes the entry of an -A line.
func (o options) service() (*Entry, error) {
	if o.realSet || o.fwdSet || o.weightSet {
		return nil, fmt.Errorf("-r, -g, -m, -i and -w belong on an -a line")
	}
	s := spec.Service{ServiceKey: o.key, Scheduler: o.sched}
	if s.Scheduler == "" {
		s.Scheduler = "wlc" // ipvsadm's default
	}
	e := &Entry{SchedFlags: o.flags, PE: o.pe}
	if o.persistent {
		s.Flags |= spec.FlagPersistent
		s.Timeout = o.timeout
	}
	if o.netmask != "" {
		bits, err := netmaskBits(o.netmask, o.key.IPv6)
		if err != nil {
			return nil, err
		}
		if bits != 32 && bits != 128 {
			s.Netmask = bits
		}
	}
	if o.ops {
		s.Flags |= spec.FlagOnePacket
	}
	for _, f := range o.flags {
		switch {
		case f == "flag-1" || f == "mh-fallback" || f == "sh-fallback":
			s.Flags |= spec.FlagMHFallback
		case f == "flag-2" || f == "mh-port" || f == "sh-port":
			s.Flags |= spec.FlagMHPort
		case f == "flag-3":
		default:
			return nil, fmt.Errorf("scheduler flag %q is not one of flag-1, flag-2, flag-3, mh-fallback, mh-port, sh-fallback, sh-port", f)
		}
	}
	e.Service = s
	return e, nil
}

func netmaskBits(s string, ipv6 bool) (int, error) {
	most := 32
	if ipv6 {
		most = 128
	}
	return importer.PrefixLen(s, most)
}

// destination makes the destination of an -a line.
func (o options) destination(s spec.Service) (spec.Destination, error) {
	if !o.realSet {
		return spec.Destination{}, fmt.Errorf("an -a line needs -r ADDRESS[:PORT]")
	}
	d := spec.Destination{DestinationKey: spec.DestinationKey{Addr: o.real.Addr(), Port: o.real.Port()},
		Weight: o.weight, Forwarding: spec.DirectRoute, UpperThreshold: o.upper, LowerThreshold: o.lower}
	if o.fwdSet {
		d.Forwarding = o.forwarding
	}
	if d.Port == 0 && s.FWMark == 0 {
		d.Port = s.Port // ipvsadm's default: the service's port
	}
	if d.Forwarding == spec.Tunnel {
		switch o.tunType {
		case "", "ipip":
		case "gue":
			d.Tunnel.Type, d.Tunnel.Port = spec.TunnelGUE, o.tunPort
		case "gre":
			d.Tunnel.Type = spec.TunnelGRE
		default:
			return d, fmt.Errorf("tunnel type %q is not ipip, gue or gre", o.tunType)
		}
		switch o.tunChecksum {
		case "--tun-csum":
			d.Tunnel.Flags |= spec.TunnelChecksum
		case "--tun-remcsum":
			d.Tunnel.Flags |= spec.TunnelRemoteChecksum
		}
	}
	return d, nil
}
