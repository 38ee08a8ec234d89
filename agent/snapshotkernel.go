package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// errSnapshotReadOnly is what a snapshot's kernel answers to any change: a
// plan from a snapshot reads, it never applies.
var errSnapshotReadOnly = errors.New("a snapshot is read-only")

// kernel is a Kernel that reads s and changes nothing, shaped as the
// host's (cmd/lvsd openKernel) so that the plan says what it would say
// there: conntrack restores and announcements possible, no relay.
func (s HostSnapshot) kernel() Kernel {
	r := snapshotKernel{s}
	return Kernel{IPVS: r, Daemons: r, Timeouts: r, NAT: r, Conntrack: r, Sysctls: r, Addrs: r, Announcer: r, TOA: snapshotTOA{s.TOA}}
}

// SnapshotTOA is the TOA program of a snapshot: where it was attached and
// the VIP:ports in its map.
type SnapshotTOA struct {
	Interfaces []string         `json:"interfaces"`
	Services   []netip.AddrPort `json:"services"`
}

// snapshotTOA answers the TOA program's reads from a snapshot.
type snapshotTOA struct{ t *SnapshotTOA }

func (r snapshotTOA) Pinned() bool { return r.t != nil }
func (r snapshotTOA) Attached(context.Context) ([]string, error) {
	if r.t == nil {
		return nil, nil
	}
	return slices.Clone(r.t.Interfaces), nil
}

// Outdated: a snapshot does not keep the programs, only where they were.
func (snapshotTOA) Outdated(context.Context) ([]string, error) { return nil, nil }
func (r snapshotTOA) Services(context.Context) ([]netip.AddrPort, error) {
	if r.t == nil {
		return nil, nil
	}
	return slices.Clone(r.t.Services), nil
}
func (snapshotTOA) Stats(context.Context) (toa.DirectorStats, error) { return toa.DirectorStats{}, nil }
func (snapshotTOA) Attach(context.Context, string) error             { return errSnapshotReadOnly }
func (snapshotTOA) Detach(context.Context, string) error             { return errSnapshotReadOnly }
func (snapshotTOA) SetServices(context.Context, []netip.AddrPort) error {
	return errSnapshotReadOnly
}
func (snapshotTOA) Remove(context.Context) error { return errSnapshotReadOnly }
func (snapshotTOA) Close() error                 { return nil }

// snapshotKernel answers the Kernel's reads from a HostSnapshot.
type snapshotKernel struct{ s HostSnapshot }

func (r snapshotKernel) Services(context.Context) ([]ipvs.Service, error) {
	out := make([]ipvs.Service, 0, len(r.s.IPVS))
	for _, svc := range r.s.IPVS {
		out = append(out, svc.service())
	}
	return out, nil
}

func (r snapshotKernel) find(key ipvs.ServiceKey) (SnapshotService, error) {
	for _, svc := range r.s.IPVS {
		if svc.key() == key {
			return svc, nil
		}
	}
	return SnapshotService{}, fmt.Errorf("service %s: %w", key, ipvs.ErrNotFound)
}

func (r snapshotKernel) Service(_ context.Context, key ipvs.ServiceKey) (ipvs.Service, error) {
	svc, err := r.find(key)
	return svc.service(), err
}

func (r snapshotKernel) Destinations(_ context.Context, key ipvs.ServiceKey) ([]ipvs.Destination, error) {
	svc, err := r.find(key)
	if err != nil {
		return nil, err
	}
	return svc.destinations(), nil
}

func (snapshotKernel) AddService(context.Context, ipvs.Service) error    { return errSnapshotReadOnly }
func (snapshotKernel) UpdateService(context.Context, ipvs.Service) error { return errSnapshotReadOnly }
func (snapshotKernel) DeleteService(context.Context, ipvs.ServiceKey) error {
	return errSnapshotReadOnly
}
func (snapshotKernel) AddDestination(context.Context, ipvs.ServiceKey, ipvs.Destination) error {
	return errSnapshotReadOnly
}
func (snapshotKernel) UpdateDestination(context.Context, ipvs.ServiceKey, ipvs.Destination) error {
	return errSnapshotReadOnly
}
func (snapshotKernel) DeleteDestination(context.Context, ipvs.ServiceKey, ipvs.DestinationKey) error {
	return errSnapshotReadOnly
}

func (r snapshotKernel) Daemons(context.Context) ([]ipvs.Daemon, error) {
	var out []ipvs.Daemon
	for _, d := range r.s.Daemons {
		daemon, err := d.daemon()
		if err != nil {
			return nil, err
		}
		out = append(out, daemon)
	}
	return out, nil
}
func (snapshotKernel) StartDaemon(context.Context, ipvs.Daemon) (ipvs.DaemonAction, error) {
	return ipvs.DaemonUnchanged, errSnapshotReadOnly
}
func (snapshotKernel) StopDaemon(context.Context, ipvs.DaemonState) error { return errSnapshotReadOnly }

func (r snapshotKernel) Timeouts(context.Context) (ipvs.Timeouts, error) {
	if r.s.Timeouts == nil {
		return ipvs.Timeouts{}, errors.New("the snapshot has no IPVS timeouts")
	}
	return r.s.Timeouts.timeouts(), nil
}
func (snapshotKernel) SetTimeouts(context.Context, ipvs.Timeouts) error { return errSnapshotReadOnly }

func (r snapshotKernel) Installed(context.Context) (string, error) { return r.s.NATDigest, nil }
func (snapshotKernel) Apply(context.Context, nat.Ruleset) error    { return errSnapshotReadOnly }
func (snapshotKernel) Remove(context.Context) error                { return errSnapshotReadOnly }

func (snapshotKernel) RestoreConntrack(context.Context, []nat.ConntrackEntry) (nat.RestoreResult, error) {
	return nat.RestoreResult{}, errSnapshotReadOnly
}

// Get answers a key the snapshot does not have with an error, not as
// missing: the host may well have it, and a plan that guessed would
// mislead.
func (r snapshotKernel) Get(_ context.Context, key string) (string, error) {
	v, ok := r.s.Sysctls[key]
	switch {
	case !ok:
		return "", fmt.Errorf("sysctl %s is not in the snapshot (take one with this configuration)", key)
	case v == nil:
		return "", &sysctl.Error{Key: key, Err: fs.ErrNotExist}
	}
	return *v, nil
}
func (snapshotKernel) Set(context.Context, string, string) error { return errSnapshotReadOnly }

// List answers an interface the snapshot does not have with an error, as
// Get a sysctl.
func (r snapshotKernel) List(_ context.Context, dev string) ([]netip.Prefix, error) {
	ps, ok := r.s.Addresses[dev]
	if !ok {
		return nil, fmt.Errorf("the addresses of %s are not in the snapshot (take one with this configuration)", dev)
	}
	return slices.Clone(ps), nil
}
func (snapshotKernel) Add(context.Context, string, netip.Prefix) error    { return errSnapshotReadOnly }
func (snapshotKernel) Delete(context.Context, string, netip.Prefix) error { return errSnapshotReadOnly }

func (snapshotKernel) Announce(context.Context, string, netip.Addr) error { return errSnapshotReadOnly }

// The snapshot kernel stands in for each interface the Kernel's fields
// need.
var (
	_ ipvs.Interface        = snapshotKernel{}
	_ ipvs.SyncDaemons      = snapshotKernel{}
	_ ipvs.TimeoutConfig    = snapshotKernel{}
	_ nat.Interface         = snapshotKernel{}
	_ nat.ConntrackRestorer = snapshotKernel{}
	_ sysctl.Interface      = snapshotKernel{}
	_ arp.Addresses         = snapshotKernel{}
	_ arp.Announcer         = snapshotKernel{}
	_ toa.Director          = snapshotTOA{}
)
