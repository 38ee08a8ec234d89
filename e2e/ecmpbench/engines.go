package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

// engine is one way for the directors to announce the VIP.
type engine interface {
	name() string
	// start starts director d's speaker and announces the VIP.
	start(ctx context.Context, d *topo.Host) error
	withdraw(ctx context.Context, i int) error
	announce(ctx context.Context, i int) error
	// crash kills director i's speaker with SIGKILL (FRR: bgpd only).
	crash(i int)
	// directorPIDs are the processes the engine runs on director i.
	directorPIDs(i int) []int
	// flaps describes the sessions that went down so far ("" if none).
	flaps(ctx context.Context) string
	stop()
}

// lvsdEngine is lvsd's embedded speaker: GoBGP and BFD in one process.
type lvsdEngine struct {
	router   *topo.Host
	vip      netip.Prefix
	speakers []*ecmplab.Speaker
}

func (e *lvsdEngine) name() string { return "lvsd (GoBGP + BFD embedded)" }

func (e *lvsdEngine) start(_ context.Context, d *topo.Host) error {
	cfg := ecmplab.SpeakerConfig{ASN: ecmplab.DirectorASN, RouterID: d.V4, Peers: []bgp.PeerConfig{{
		Address: e.router.V4, ASN: ecmplab.RouterASN, LocalAddress: d.V4, BFD: true,
		BFDTimers: bfd.Timers{DesiredMinTx: *interval, RequiredMinRx: *interval, DetectMult: bfd.DefaultDetectMult},
		HoldTime:  3 * time.Second, KeepaliveInterval: time.Second, ConnectRetry: time.Second}}}
	s, err := ecmplab.StartSpeaker(d, cfg)
	if err != nil {
		return err
	}
	e.speakers = append(e.speakers, s)
	return e.announce(context.Background(), len(e.speakers)-1)
}

func (e *lvsdEngine) withdraw(ctx context.Context, i int) error { return e.speakers[i].Withdraw(ctx) }

func (e *lvsdEngine) announce(ctx context.Context, i int) error {
	return e.speakers[i].SetRoutes(ctx, bgp.Route{Prefix: e.vip})
}

func (e *lvsdEngine) crash(i int) { e.speakers[i].Kill() }

func (e *lvsdEngine) directorPIDs(i int) []int {
	if e.speakers[i].Exited() {
		return nil
	}
	return []int{e.speakers[i].PID()}
}

func (e *lvsdEngine) flaps(ctx context.Context) string {
	var out []string
	for i, s := range e.speakers {
		if s.Exited() {
			continue
		}
		st, err := s.Status(ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("director %d: %v", i+1, err))
			continue
		}
		for _, p := range st.Peers {
			if p.Flaps > 0 {
				out = append(out, fmt.Sprintf("director %d: %d flaps, last %s", i+1, p.Flaps, p.LastFlapReason))
			}
		}
	}
	return strings.Join(out, "; ")
}

func (e *lvsdEngine) stop() {
	for _, s := range e.speakers {
		if !s.Exited() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Close(ctx)
			cancel()
		}
	}
}

// frrEngine is FRR on every director (zebra, bfdd, bgpd), driven through
// vtysh, as MetalLB's FRR mode drives it.
type frrEngine struct {
	router *topo.Host
	vip    netip.Prefix
	frrs   []*topo.FRR
}

func (e *frrEngine) name() string { return "FRR 8.4 on the director (vtysh)" }

func (e *frrEngine) start(ctx context.Context, d *topo.Host) error {
	if err := d.AddAddr(e.vip, "lo"); err != nil {
		return err
	}
	f, err := d.StartFRR(ctx, withInterval(ecmplab.DirectorFRRConfig(d.V4, e.router.V4, e.vip)))
	if err != nil {
		return err
	}
	e.frrs = append(e.frrs, f)
	return nil
}

func (e *frrEngine) network(ctx context.Context, i int, no string) error {
	_, err := e.frrs[i].Vtysh(ctx, "configure terminal", fmt.Sprintf("router bgp %d", ecmplab.DirectorASN),
		"address-family ipv4 unicast", no+"network "+e.vip.String())
	return err
}

func (e *frrEngine) withdraw(ctx context.Context, i int) error { return e.network(ctx, i, "no ") }
func (e *frrEngine) announce(ctx context.Context, i int) error { return e.network(ctx, i, "") }
func (e *frrEngine) crash(i int)                               { _ = e.frrs[i].Kill("bgpd") }

func (e *frrEngine) directorPIDs(i int) []int {
	var out []int
	for _, pid := range e.frrs[i].PIDs() {
		out = append(out, pid)
	}
	return out
}

// flaps: FRR counts them in "show bgp neighbors" (Connections
// established/dropped).
func (e *frrEngine) flaps(ctx context.Context) string {
	var out []string
	for i, f := range e.frrs {
		o, err := f.Vtysh(ctx, "show bgp neighbors "+e.router.V4.String())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(o, "\n") {
			if strings.Contains(line, "Connections established") && !strings.Contains(line, "dropped 0") {
				out = append(out, fmt.Sprintf("director %d: %s", i+1, strings.TrimSpace(line)))
			}
		}
	}
	return strings.Join(out, "; ")
}

func (e *frrEngine) stop() {
	for _, f := range e.frrs {
		_ = f.Stop()
	}
}

// withInterval puts -bfd-interval into a director's FRR configuration in
// place of the profile's 100 ms.
func withInterval(config string) string {
	ms := fmt.Sprintf("%d", interval.Milliseconds())
	config = strings.Replace(config, "receive-interval 100\n", "receive-interval "+ms+"\n", 1)
	return strings.Replace(config, "transmit-interval 100\n", "transmit-interval "+ms+"\n", 1)
}
