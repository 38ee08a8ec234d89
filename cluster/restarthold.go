package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// A planned restart (a package upgrade) keeps the VIPs where they are. The
// kernel forwards all along and the next process adopts the kernel's
// state, so moving the VIPs to a peer and back would cost two gaps for new
// connections and buy nothing. Before the restart the director tells its
// peers, in every heartbeat (the restart-hold extension), "I am
// restarting, keep my VIPs where they are for N seconds"; a peer that then
// hears nothing from it keeps its claims valid (peerRestarting) until the
// hold ends, instead of taking its VIPs after the failure timeout. The
// director stops without releasing its addresses (Leave), their kernel
// lifetime covers the hold (the agent renews them for it), and the next
// process adopts them (Config.Adopt) and claims them from its first
// heartbeat, which the peers accept as a new incarnation of the same
// owner. A hold that ends without the director back is a failure like any
// other: the peers take over.
//
// Only an explicit hold does this: a plain stop hands the VIPs over at once
// and a crash is taken over after the failure timeout, as without it. A
// director of the release before (wire v3, or v4 without this extension)
// skips the extension and takes over as it always did.

const (
	// extRestartHold is the heartbeat extension type of the restart hold:
	// two bytes, the hold's remaining whole seconds (big endian).
	extRestartHold byte = 0x52
	// MaxRestartHold bounds a hold, which a peer clamps to it: a director
	// that does not come back is taken over within a minute at most.
	MaxRestartHold = 60 * time.Second
	// DefaultRestartHold covers a restart with its start-up hold and the
	// replay of the peers' connections.
	DefaultRestartHold = 20 * time.Second
)

// appendRestartHold appends hb's restart-hold extension, if any, to b.
func (hb heartbeat) appendRestartHold(b []byte) []byte {
	if hb.RestartHold <= 0 {
		return b
	}
	secs := (min(hb.RestartHold, MaxRestartHold) + time.Second - 1) / time.Second
	return binary.BigEndian.AppendUint16(append(b, extRestartHold, 2), uint16(secs))
}

// restartHoldOf reads the restart hold from a v4 heartbeat's extensions:
// zero without one, at most MaxRestartHold.
func restartHoldOf(exts []byte) (time.Duration, error) {
	v, ok := identity.Extension(exts, extRestartHold)
	if !ok {
		return 0, nil
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("restart hold extension of %d bytes, want 2", len(v))
	}
	return min(time.Duration(binary.BigEndian.Uint16(v))*time.Second, MaxRestartHold), nil
}

// RestartHold is a hold in force: until when, and the VIPs this director
// held when it was asked for.
type RestartHold struct {
	Until time.Time
	VIPs  []netip.Addr
}

// ErrRestartHoldRange is a hold asked for longer than MaxRestartHold.
var ErrRestartHoldRange = fmt.Errorf("a restart hold lasts at most %s", MaxRestartHold)

// HoldForRestart asks the peers, from the next heartbeat (sent at once) on,
// to keep this director's VIPs where they are for d: it is about to
// restart. Leave then keeps the addresses and does not say it leaves. d <= 0
// ends a hold. Safe to call from any goroutine.
func (n *Node) HoldForRestart(ctx context.Context, d time.Duration) (RestartHold, error) {
	if d > MaxRestartHold {
		return RestartHold{}, ErrRestartHoldRange
	}
	if n.leaving.Load() {
		return RestartHold{}, errors.New("the cluster node is leaving")
	}
	var h RestartHold
	var old []string
	err := n.do(ctx, func() {
		s := &n.st
		now := time.Now()
		if old = s.peersWithoutHold(); d > 0 && len(old) > 0 {
			return
		}
		s.restartUntil = time.Time{}
		if d > 0 {
			s.restartUntil = now.Add(d)
			h.Until = s.restartUntil
			h.VIPs = slices.SortedFunc(maps.Keys(s.want), netip.Addr.Compare)
			n.log.Info("restart hold: the other directors keep this director's VIPs where they are while it restarts",
				"hold", d.String(), "vips", len(h.VIPs))
		} else {
			n.log.Info("restart hold ended")
		}
		s.sendHeartbeat()
	})
	if err == nil && d > 0 && len(old) > 0 {
		return RestartHold{}, fmt.Errorf("%w: %s", ErrRestartHoldUnknown, strings.Join(old, ", "))
	}
	return h, err
}

// ErrRestartHoldUnknown refuses a hold some live director would not read:
// it would take the VIPs over after the failure timeout anyway, while the
// addresses kept here answer too until the hold ends.
var ErrRestartHoldUnknown = errors.New("directors of a release without the restart hold (wire version 3) would take the VIPs over anyway; restart without it, or upgrade them first")

// peersWithoutHold names the counted peers heard in wire version 3 only.
func (s *loopState) peersWithoutHold() []string {
	var out []string
	for _, p := range s.peers {
		if w, ok := s.wire[p.addr]; p.state.counted() && (!ok || w.version < hbVersion) {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

// restartHeld reports whether a restart hold of this director's is in
// force at now.
func (s *loopState) restartHeld(now time.Time) bool {
	return now.Before(s.restartUntil)
}

// restartHoldLeft is what is left of this director's hold at now, for its
// heartbeats (zero: none).
func (s *loopState) restartHoldLeft(now time.Time) time.Duration {
	if !s.restartHeld(now) {
		return 0
	}
	return s.restartUntil.Sub(now)
}

// sendRestarting is the last word of a director that stops for a restart
// under a hold: its heartbeat with the hold, a few times (UDP), instead of
// saying it leaves.
func (s *loopState) sendRestarting() {
	hb := s.heartbeat(false)
	for range 3 {
		s.send(hb)
	}
}

// adopt starts a node with the VIPs its predecessor held under a restart
// hold: held and claimed from the first heartbeat on, until the start-up
// hold is over (then the rules decide, with this director ready and
// claiming them) or the hold ends.
func (s *loopState) adopt(vips []netip.Addr, until time.Time) {
	if len(vips) == 0 || !time.Now().Before(until) {
		return
	}
	s.adopted, s.adoptUntil = map[netip.Addr]bool{}, until
	for _, v := range vips {
		s.adopted[v.Unmap()] = true
		s.want[v.Unmap()] = true
	}
	s.n.held = maps.Clone(s.want)
	s.n.log.Info("adopting the VIPs held before the restart", "vips", len(s.adopted), "hold_left", time.Until(until).Round(time.Millisecond).String())
}

// adopting reports whether the adopted VIPs are still held whatever the
// rules say: the start-up hold is not over and the restart hold is not.
func (s *loopState) adopting(now time.Time) bool {
	return len(s.adopted) > 0 && !s.ready && !s.leaving && now.Before(s.adoptUntil)
}

// keepAdopted adds the adopted VIPs to hold while adopting; once that is
// over it forgets them and reports so (the decision may change).
func (s *loopState) keepAdopted(hold map[netip.Addr]bool, now time.Time) {
	if !s.adopting(now) {
		return
	}
	for v := range s.adopted {
		if !s.servedOnce || s.vips[v] {
			hold[v] = true
		}
	}
}

// endAdoption forgets the adopted VIPs once adopting is over; it reports
// whether it did.
func (s *loopState) endAdoption(now time.Time) bool {
	if len(s.adopted) == 0 || s.adopting(now) {
		return false
	}
	if !s.ready {
		s.n.log.Warn("restart hold over before the start-up hold: the VIPs adopted go as the cluster decides", "vips", len(s.adopted))
	}
	s.adopted = nil
	return true
}

// noteRestartHold records the restart hold a fresh heartbeat of p carries
// (hold: zero without one, which ends a hold asked for before).
func (s *loopState) noteRestartHold(p *peer, hold time.Duration, at time.Time) {
	if hold <= 0 {
		if !p.holdUntil.IsZero() {
			s.n.log.Info("director ended its restart hold", "peer", p.name)
		}
		p.holdUntil = time.Time{}
		return
	}
	if p.holdUntil.IsZero() {
		s.n.log.Info("director about to restart: keeping its VIPs where they are while it does", "peer", p.name,
			"hold", hold.String())
	}
	p.holdUntil = at.Add(hold)
}
