package ipvsadm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// lvsdSchedulers are the schedulers lvsd's configuration takes
// (config.Schedulers, which this pure package does not import).
var lvsdSchedulers = []string{"mh", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "twos"}

// Convert makes one service file per IPVS service of the table, source
// naming the input in the report ("ipvsadm.txt", "kernel").
func Convert(t *Table, source string) *importer.Result {
	res := &importer.Result{}
	names := map[string]bool{}
	for _, e := range t.Entries {
		note := func(o importer.Outcome, keyword, format string, args ...any) {
			line := e.Line
			if k, ok := strings.CutPrefix(keyword, "-r "); ok {
				for dk, l := range e.DestLines {
					if dk.String() == k {
						line = l
					}
				}
			}
			res.Note(source, line, e.Service.ServiceKey.String()+" "+keyword, o, format, args...)
		}
		content, name, ok := convertEntry(e, note)
		if !ok {
			continue
		}
		for i := 2; names[name]; i++ {
			name = fmt.Sprintf("%s-%d", strings.TrimSuffix(name, "-"+strconv.Itoa(i-1)), i)
		}
		names[name] = true
		content = strings.Replace(content, "service: NAME\n", "service: "+importer.Text(name)+"\n", 1)
		res.Files = append(res.Files, importer.File{Path: "services.d/" + name + ".yaml", Content: content})
	}
	return res
}

type noteFunc func(o importer.Outcome, keyword, format string, args ...any)

func convertEntry(e *Entry, note noteFunc) (content, name string, ok bool) {
	s := e.Service
	if s.FWMark != 0 {
		note(importer.NotMapped, "fwmark", "lvsd gives each service its own firewall mark and sets it in its own nftables table: rewrite the rules that set mark %d as the service's ports, port ranges or `ports: [all]`", s.FWMark)
		return "", "", false
	}
	if len(e.Destinations) == 0 {
		note(importer.NotMapped, "service", "it has no real server; lvsd needs at least one backend")
		return "", "", false
	}
	if !slices.Contains(lvsdSchedulers, s.Scheduler) {
		note(importer.NotMapped, "-s", "scheduler %s is not one lvsd takes (%s)", s.Scheduler, strings.Join(lvsdSchedulers, ", "))
		return "", "", false
	}
	if s.Addr.IsLoopback() || s.Addr.IsMulticast() || s.Addr.IsUnspecified() {
		note(importer.NotMapped, "service", "%s is not a unicast address lvsd can hold as a VIP", s.Addr)
		return "", "", false
	}
	proto := protocolName(s.Protocol)
	if proto == "" {
		note(importer.NotMapped, "service", "protocol %d is not tcp, udp or sctp", s.Protocol)
		return "", "", false
	}
	fwd, tunnel := forwarding(e, note)
	name = importer.ServiceName(s.Addr, int(s.Port), proto)
	var w importer.Writer
	if e.Line > 0 {
		w.Comment(0, fmt.Sprintf("Imported from line %d of ipvsadm -Sn: %s.", e.Line, s.ServiceKey))
	} else {
		w.Comment(0, fmt.Sprintf("Imported from the kernel's IPVS table: %s.", s.ServiceKey))
	}
	w.Key(0, "service", "NAME", "")
	w.Key(0, "vip", importer.Text(s.Addr.String()), "")
	w.Key(0, "protocol", proto, "")
	w.Key(0, "ports", "["+strconv.Itoa(int(s.Port))+"]", "")
	fwdNote := ""
	if fwd != "dr" {
		fwdNote = "lvsd's default is dr"
	}
	w.Key(0, "forwarding", fwd, fwdNote)
	if tunnel != "" {
		w.Key(0, "tunnel", tunnel, "")
	}
	schedNote := ""
	if s.Scheduler != "mh" {
		schedNote = "as in IPVS; lvsd's default is mh (Maglev)"
	}
	w.Key(0, "scheduler", s.Scheduler, schedNote)
	note(importer.Mapped, "-s", "scheduler: %s", s.Scheduler)
	flags(e, &w, note)
	if s.Flags&spec.FlagPersistent != 0 {
		if s.Netmask != 0 && s.Netmask != s.Addr.BitLen() {
			w.Key(0, "persistence", fmt.Sprintf("{timeout: %ds, netmask: %d}", s.Timeout, s.Netmask), "")
		} else {
			w.Key(0, "persistence", fmt.Sprintf("{timeout: %ds}", s.Timeout), "")
		}
		note(importer.Mapped, "-p", "persistence.timeout: %ds", s.Timeout)
	}
	w.Key(0, "backends", "", "")
	dests := slices.Clone(e.Destinations)
	slices.SortFunc(dests, func(a, b spec.Destination) int { return a.DestinationKey.Compare(b.DestinationKey) })
	seen := map[string]bool{}
	for _, d := range dests {
		if d.Addr.Is4() != s.Addr.Is4() {
			note(importer.NotMapped, "-r "+d.DestinationKey.String(), "a real server of the other address family: lvsd's backends are of the VIP's family")
			continue
		}
		if seen[d.Addr.String()] && fwd != "nat" {
			note(importer.NotMapped, "-r "+d.DestinationKey.String(), "a second port of the same real server: with %s forwarding lvsd's backend is an address", fwd)
			continue
		}
		seen[d.Addr.String()] = true
		fields := []string{"address: " + importer.Text(d.Addr.String())}
		if fwd == "nat" && d.Port != s.Port {
			fields = append(fields, "port: "+strconv.Itoa(int(d.Port)))
		} else if d.Port != s.Port {
			note(importer.Approximated, "-r "+d.DestinationKey.String(), "%s forwarding cannot change the port: the backend gets port %d", fwd, s.Port)
		}
		weight := d.Weight
		if weight > 65535 {
			note(importer.Approximated, "-w", "weight %d is above lvsd's 65535", weight)
			weight = 65535
		}
		fields = append(fields, "weight: "+strconv.Itoa(weight))
		if d.UpperThreshold > 0 && d.UpperThreshold <= 1<<31-1 {
			fields = append(fields, "upper_threshold: "+strconv.FormatUint(uint64(d.UpperThreshold), 10))
			if d.LowerThreshold > 0 && d.LowerThreshold <= d.UpperThreshold {
				fields = append(fields, "lower_threshold: "+strconv.FormatUint(uint64(d.LowerThreshold), 10))
			}
		} else if d.LowerThreshold > 0 {
			note(importer.NotMapped, "-y", "a lower threshold without an upper one does nothing in IPVS; lvsd needs upper_threshold with it")
		}
		w.Item(2, "{"+strings.Join(fields, ", ")+"}", "")
		note(importer.Mapped, "-r "+d.DestinationKey.String(), "backend, weight %d", weight)
	}
	if len(seen) == 0 {
		note(importer.NotMapped, "service", "none of its real servers could be mapped")
		return "", "", false
	}
	return w.String(), name, true
}

func protocolName(p l4.Protocol) string {
	switch p {
	case l4.TCP:
		return "tcp"
	case l4.UDP:
		return "udp"
	case l4.SCTP:
		return "sctp"
	}
	return ""
}

// forwarding is the service's forwarding: lvsd's is per service, IPVS's
// per destination (the first one's wins when they differ).
func forwarding(e *Entry, note noteFunc) (string, string) {
	first := e.Destinations[0]
	for _, d := range e.Destinations[1:] {
		if d.Forwarding != first.Forwarding || d.Tunnel != first.Tunnel {
			note(importer.Approximated, "-g/-m/-i", "lvsd forwards to every backend of a service the same way: %s, as the first real server", first.Forwarding)
			break
		}
	}
	switch first.Forwarding {
	case spec.Masquerade:
		note(importer.Mapped, "-m", "forwarding: nat")
		return "nat", ""
	case spec.Tunnel:
		t := first.Tunnel
		note(importer.Mapped, "-i", "forwarding: tunnel (%s)", t)
		var parts []string
		switch t.Type {
		case spec.TunnelGUE:
			parts = append(parts, "encap: gue", "port: "+strconv.Itoa(int(t.Port)))
		case spec.TunnelGRE:
			parts = append(parts, "encap: gre")
		}
		if t.Flags&spec.TunnelChecksum != 0 && t.Type == spec.TunnelGUE {
			parts = append(parts, "checksum: checksum")
		} else if t.Flags != 0 {
			note(importer.NotMapped, "--tun-csum", "lvsd's tunnels take a checksum only with gue, and no remote checksum offload")
		}
		if len(parts) == 0 {
			return "tunnel", ""
		}
		return "tunnel", "{" + strings.Join(parts, ", ") + "}"
	}
	note(importer.Mapped, "-g", "forwarding: dr")
	return "dr", ""
}

// flags writes what the service's flags ask for: affinity for mh, and
// reports what lvsd does not set.
func flags(e *Entry, w *importer.Writer, note noteFunc) {
	s := e.Service
	if s.Flags&spec.FlagOnePacket != 0 {
		note(importer.NotMapped, "-o", "lvsd does not turn on one-packet scheduling")
	}
	if e.PE != "" {
		note(importer.NotMapped, "--pe", "lvsd has no persistence engine (%s)", e.PE)
	}
	if s.Scheduler != "mh" {
		if s.Flags&(spec.FlagMHFallback|spec.FlagMHPort) != 0 {
			note(importer.NotMapped, "-b", "lvsd sets no scheduler flags for %s (%s)", s.Scheduler, strings.Join(e.SchedFlags, ","))
		}
		return
	}
	if s.Flags&spec.FlagMHFallback == 0 {
		note(importer.Approximated, "-s mh", "lvsd always sets mh-fallback, so a backend at weight 0 hands its new connections to the others")
	} else {
		note(importer.Mapped, "-b mh-fallback", "lvsd always sets it with mh")
	}
	if s.Flags&spec.FlagMHPort == 0 {
		w.Key(0, "affinity", "client-ip", "mh without mh-port hashes the client address only")
		note(importer.Mapped, "-s mh", "affinity: client-ip (no mh-port)")
	} else {
		note(importer.Mapped, "-b mh-port", "affinity: none (lvsd's default)")
	}
}
