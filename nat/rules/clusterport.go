package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// ClusterPort keeps strangers off the cluster port (memberlist, UDP and
// TCP): the directors' failure detection reads every datagram sent there
// from one socket, and a stream accepted there is read before it is
// authenticated. Sources outside Allow are dropped in the input hook, and
// any one source sending more than Rate packets a second has the rest
// dropped, so a flood costs the kernel a lookup per packet, not lvsd a
// decryption.
type ClusterPort struct {
	Port uint16
	// Allow are the sources admitted, of either family; a family without
	// any is dropped whole (the cluster listens on one address). A /0
	// admits every source of its family.
	Allow []netip.Prefix
	// Rate is the packets per second one source may send before the rest
	// is dropped (per source address, in a set of at most MeterSize
	// sources); 0: no limit.
	Rate uint32
}

// Limits of the cluster port's meter.
const (
	// ClusterMeter is the name of the dynamic set holding each source's
	// packet budget.
	ClusterMeter = "cluster_flood"
	// MeterSize bounds the sources the meter tracks: when it is full, a new
	// source gets no budget of its own and is not limited (the kernel does
	// not add it), but the allow set already dropped every stranger.
	MeterSize = 65536
	// meterTimeout forgets a source that went quiet.
	meterTimeout = 10 * time.Second
)

// Meter is a dynamic set of a table: the rate of each source.
type Meter struct {
	Name    string
	Size    uint32
	Timeout time.Duration
}

func (c ClusterPort) check() error {
	if c.Port == 0 {
		return errors.New("port 0")
	}
	for _, p := range c.Allow {
		if !p.IsValid() {
			return errors.New("invalid source prefix")
		}
		if err := checkAddr(p.Addr()); err != nil {
			return fmt.Errorf("source %s: %w", p, err)
		}
		if p.Masked() != p {
			return fmt.Errorf("source %s has host bits set (did you mean %s?)", p, p.Masked())
		}
	}
	return nil
}

// clusterPortRules are the input rules of family fam for c: strangers
// dropped, then sources over their rate. Packets arriving on lo (the
// director talking to itself) are left alone.
func clusterPortRules(fam Family, c ClusterPort) ([]Rule, *Meter) {
	base := Rule{NotIIF: "lo", Protos: []l4.Protocol{l4.TCP, l4.UDP}, THDport: c.Port, Verdict: Drop}
	var allow []AddrRange
	everyone := false
	for _, p := range c.Allow {
		if familyOf(p.Addr()) != fam {
			continue
		}
		if p.Bits() == 0 {
			everyone = true
		}
		allow = append(allow, prefixRange(p))
	}
	var out []Rule
	if !everyone {
		r := base
		r.NotSAddr = mergeRanges(allow)
		r.Comment = "only the directors reach the cluster port"
		if len(allow) == 0 {
			r.Comment = "no director speaks this family"
		}
		out = append(out, r)
	}
	if c.Rate == 0 {
		return out, nil
	}
	r := base
	r.Meter, r.MeterRate, r.MeterBurst = ClusterMeter, c.Rate, max(c.Rate/10, 5)
	r.Comment = "cluster port rate per source"
	return append(out, r), &Meter{Name: ClusterMeter, Size: MeterSize, Timeout: meterTimeout}
}
