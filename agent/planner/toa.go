package planner

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
)

// TOA is the director's TOA program (nat/toa, docs/toa.md): the client-facing
// interfaces it is attached to and the VIP:ports whose SYNs it gives the
// client's address. Desired and read back alike; zero: no program.
type TOA struct {
	Interfaces []string         // sorted
	Services   []netip.AddrPort // sorted
	// Pinned, read back only, says the program's objects exist (pinned by
	// this lvsd or a previous one), attached or not: they must go when no
	// service wants them.
	Pinned bool
	// Outdated, read back only, are the Interfaces whose program is not
	// this build's: a previous release's, left attached across an upgrade.
	Outdated []string // sorted
}

// Wanted reports whether t asks for the program.
func (t TOA) Wanted() bool { return len(t.Services) > 0 }

// desiredTOA is the TOA program services ask for: every VIP:port of their
// services with client_address toa, on the interface each service's VIP
// arrives on (its own interface, or the agent file's). More VIP:ports than
// the program's map holds is an error: the configuration is refused rather
// than some services silently going without.
func desiredTOA(agent *config.Agent, services []*config.Service) (TOA, error) {
	var t TOA
	for _, s := range services {
		if s.ClientAddress != config.ClientAddressTOA {
			continue
		}
		t.Interfaces = append(t.Interfaces, cmp.Or(s.Interface, agent.Interface))
		for _, r := range s.Ports {
			for p := int(r.From); p <= int(r.To); p++ {
				t.Services = append(t.Services, netip.AddrPortFrom(s.VIP, uint16(p)))
			}
		}
	}
	slices.Sort(t.Interfaces)
	t.Interfaces = slices.Compact(t.Interfaces)
	slices.SortFunc(t.Services, netip.AddrPort.Compare)
	t.Services = slices.Compact(t.Services)
	switch {
	case len(t.Services) == 0:
		return TOA{}, nil
	case len(t.Services) > config.MaxTOAPorts:
		return TOA{}, fmt.Errorf("the services with client_address toa have %d VIP:ports in all; the director's TOA program takes at most %d",
			len(t.Services), config.MaxTOAPorts)
	}
	return t, nil
}

// sameTOA reports whether services a and b ask the same of the TOA program.
func sameTOA(a, b *config.Service) bool {
	if a.ClientAddress != b.ClientAddress {
		return false
	}
	return a.ClientAddress != config.ClientAddressTOA || slices.Equal(a.Ports, b.Ports) && a.Interface == b.Interface
}

// planTOA takes the TOA program from a to d: the services first, so an
// interface it is attached to next filters the right VIP:ports from its
// first packet; then the new interfaces; then those no longer wanted. With
// no service left, everything goes at once. A program found attached (a
// previous lvsd's) is adopted as it is when it is this build's: no op; a
// previous release's is replaced in place (toa-attach swaps the filter's
// program without a moment unfiltered).
func planTOA(d, a TOA) []Op {
	if !d.Wanted() {
		if a.Pinned || len(a.Interfaces) > 0 || len(a.Services) > 0 {
			return []Op{{Kind: RemoveTOA, Reason: "no service has client_address toa", Detail: &Detail{}}}
		}
		return nil
	}
	var ops []Op
	if !slices.Equal(d.Services, a.Services) {
		ops = append(ops, Op{Kind: SetTOAServices, Detail: &Detail{TOAServices: d.Services}})
	}
	for _, dev := range d.Interfaces {
		switch {
		case !slices.Contains(a.Interfaces, dev):
			ops = append(ops, Op{Kind: AttachTOA, Reason: "VIPs with client_address toa arrive here", Detail: &Detail{Interface: dev}})
		case slices.Contains(a.Outdated, dev):
			ops = append(ops, Op{Kind: AttachTOA, Reason: "the attached program is another build's (an upgrade): replaced in place",
				Detail: &Detail{Interface: dev}})
		}
	}
	for _, dev := range a.Interfaces {
		if !slices.Contains(d.Interfaces, dev) {
			ops = append(ops, Op{Kind: DetachTOA, Reason: "no VIP with client_address toa arrives here", Detail: &Detail{Interface: dev}})
		}
	}
	return ops
}

// appliedTOA is t once op ran.
func appliedTOA(t TOA, op Op) TOA {
	switch op.Kind {
	case SetTOAServices:
		t.Services, t.Pinned = op.TOAServices, true
	case AttachTOA:
		t.Interfaces = slices.Clone(t.Interfaces)
		t.Interfaces = append(t.Interfaces, op.Interface)
		slices.Sort(t.Interfaces)
		t.Interfaces, t.Pinned = slices.Compact(t.Interfaces), true
		t.Outdated = slices.DeleteFunc(slices.Clone(t.Outdated), func(s string) bool { return s == op.Interface })
	case DetachTOA:
		t.Interfaces = slices.DeleteFunc(slices.Clone(t.Interfaces), func(s string) bool { return s == op.Interface })
		t.Outdated = slices.DeleteFunc(slices.Clone(t.Outdated), func(s string) bool { return s == op.Interface })
	case RemoveTOA:
		t = TOA{}
	}
	return t
}

// describeTOAServices says what a SetTOAServices op sets: how many, and
// the first few.
func describeTOAServices(vips []netip.AddrPort) string {
	const shown = 4
	parts := make([]string, 0, shown+1)
	for i, v := range vips {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(vips)-shown))
			break
		}
		parts = append(parts, v.String())
	}
	return fmt.Sprintf("%d (%s)", len(vips), strings.Join(parts, " "))
}
