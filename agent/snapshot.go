package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// SnapshotSchema is the version of the snapshot document. A reader refuses
// any other: a field it does not know could change the plan.
const SnapshotSchema = 1

// HostSnapshot is everything `lvsd plan` reads from a director's host, taken
// at one moment (`lvsd snapshot`), so that the plan can be made later,
// elsewhere, without root or IPVS (`lvsd plan --from`).
type HostSnapshot struct {
	Schema  int       `json:"schema"`
	Taken   time.Time `json:"taken"`
	Host    string    `json:"host"`
	Version string    `json:"lvsd_version"`
	// Config is the agent file the snapshot was taken with.
	Config string `json:"config"`

	// IPVS are the kernel's virtual services, lvsd's or not, each with its
	// destinations in the kernel's order.
	IPVS []SnapshotService `json:"ipvs_services"`
	// Daemons are the running connection-sync daemons.
	Daemons []SnapshotDaemon `json:"sync_daemons"`
	// Timeouts are the IPVS timeouts in force.
	Timeouts *SnapshotTimeouts `json:"ipvs_timeouts,omitempty"`
	// Sysctls are the kernel parameters lvsd may set; null: the host has
	// no such key (its module not loaded, its interface gone).
	Sysctls map[string]*string `json:"sysctls"`
	// NATDigest is the digest of lvsd's nftables tables ("": none, or
	// not lvsd's).
	NATDigest string `json:"nft_digest"`
	// Addresses are the addresses on the interfaces lvsd uses.
	Addresses map[string][]netip.Prefix `json:"addresses"`
	// TOA is the TOA program found pinned (client_address: toa); nil: none.
	TOA *SnapshotTOA `json:"toa,omitempty"`

	// The state directory's records.
	OwnedServices  []SnapshotKey             `json:"owned_services"`
	OwnedAddresses []planner.OwnedAddress    `json:"owned_addresses"`
	Overrides      []planner.BackendOverride `json:"overrides"`

	// ClusterAdmitted is the cluster port's default allow set found on
	// the host (nil: no cluster, or allow_from set).
	ClusterAdmitted []netip.Prefix `json:"cluster_admitted,omitempty"`
	// HeldVIPs are the VIPs the running agent held, in a cluster; none
	// when it held none or did not answer.
	HeldVIPs []netip.Addr `json:"held_vips,omitempty"`
}

// TakeSnapshot reads from k and cfg's state directory what PlanFor reads,
// and more sysctls than cfg sets, so that a changed configuration can be
// planned from it too. held are the VIPs the running agent holds (nil:
// none answered); version is lvsd's.
func TakeSnapshot(ctx context.Context, path string, cfg *LoadedConfig, k Kernel, held []netip.Addr, version string) (HostSnapshot, error) {
	s := HostSnapshot{Schema: SnapshotSchema, Taken: time.Now().UTC().Truncate(time.Second), Version: version, Config: path,
		Sysctls: map[string]*string{}, Addresses: map[string][]netip.Prefix{}, Daemons: []SnapshotDaemon{}}
	s.Host, _ = os.Hostname()
	owned, addrs, overrides, err := loadRecords(cfg.Agent.StateDir)
	if err != nil {
		return HostSnapshot{}, err
	}
	// Empty lists, not null: the document reads the same on every host.
	s.OwnedAddresses = append([]planner.OwnedAddress{}, addrs...)
	s.Overrides = append([]planner.BackendOverride{}, overrides...)
	s.OwnedServices = make([]SnapshotKey, 0, len(owned))
	for _, key := range owned {
		s.OwnedServices = append(s.OwnedServices, snapshotKey(key))
	}
	if s.NATDigest, err = k.NAT.Installed(ctx); err != nil {
		return HostSnapshot{}, err
	}
	if k.Daemons != nil {
		daemons, err := k.Daemons.Daemons(ctx)
		if err != nil {
			return HostSnapshot{}, err
		}
		for _, d := range daemons {
			s.Daemons = append(s.Daemons, snapshotDaemon(d))
		}
	}
	svcs, err := k.IPVS.Services(ctx)
	if err != nil {
		return HostSnapshot{}, err
	}
	s.IPVS = make([]SnapshotService, 0, len(svcs))
	for _, svc := range svcs {
		dsts, err := k.IPVS.Destinations(ctx, svc.ServiceKey)
		if err != nil {
			return HostSnapshot{}, err
		}
		s.IPVS = append(s.IPVS, snapshotService(svc, dsts))
	}
	if k.Timeouts != nil {
		t, err := k.Timeouts.Timeouts(ctx)
		if err != nil {
			return HostSnapshot{}, err
		}
		s.Timeouts = snapshotTimeouts(t)
	}
	for _, key := range managedSysctls(cfg) {
		v, err := k.Sysctls.Get(ctx, key)
		switch {
		case errors.Is(err, sysctl.ErrMissing):
			s.Sysctls[key] = nil
		case err != nil:
			return HostSnapshot{}, err
		default:
			s.Sysctls[key] = &v
		}
	}
	if s.Addresses, err = listPresent(ctx, k, cfg.Desired); err != nil {
		return HostSnapshot{}, err
	}
	t, err := k.readTOA(ctx)
	if err != nil {
		return HostSnapshot{}, err
	}
	if t.Pinned {
		s.TOA = &SnapshotTOA{Interfaces: append([]string{}, t.Interfaces...), Services: append([]netip.AddrPort{}, t.Services...)}
	}
	if c := cfg.Agent.Cluster; c != nil {
		s.ClusterAdmitted = c.Admitted
		s.HeldVIPs = append([]netip.Addr{}, held...)
	}
	return s, nil
}

// managedSysctls are the keys lvsd may set on a director with cfg's
// interface, whichever services and cluster settings the configuration
// has, and those cfg sets.
func managedSysctls(cfg *LoadedConfig) []string {
	iface := cfg.Agent.Interface
	keys := maps.Clone(cfg.Desired.Sysctls)
	if keys == nil {
		keys = map[string]string{}
	}
	maps.Copy(keys, nat.ForwardingSysctls(true, true, iface))
	maps.Copy(keys, nat.FullNATSysctls())
	maps.Copy(keys, ipvs.ConnectionExpirySysctls())
	maps.Copy(keys, ipvs.RecommendedSyncSysctls().Sysctls())
	keys[nat.SysctlTCPBeLiberal] = ""
	keys["net/ipv4/conf/"+iface+"/arp_ignore"] = ""
	keys["net/ipv4/conf/"+iface+"/arp_announce"] = ""
	return slices.Sorted(maps.Keys(keys))
}

// loadRecords reads the state directory's records plan takes in.
func loadRecords(stateDir string) ([]ipvs.ServiceKey, []planner.OwnedAddress, []planner.BackendOverride, error) {
	owned, err := LoadOwnedServices(stateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	addrs, err := LoadOwnedAddresses(stateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	overrides, err := LoadOverrides(stateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	return owned.Services, addrs.Addresses, overrides.List(), nil
}

// ReadSnapshot reads the snapshot in file, refusing one of another schema.
func ReadSnapshot(file string) (HostSnapshot, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return HostSnapshot{}, err
	}
	var head struct {
		Schema *int `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return HostSnapshot{}, fmt.Errorf("%s: not a snapshot of lvsd: %w", file, err)
	}
	switch {
	case head.Schema == nil:
		return HostSnapshot{}, fmt.Errorf("%s: not a snapshot of lvsd: no \"schema\"", file)
	case *head.Schema != SnapshotSchema:
		return HostSnapshot{}, fmt.Errorf("%s: snapshot schema %d; this lvsd reads schema %d only", file, *head.Schema, SnapshotSchema)
	}
	var s HostSnapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a field this schema lacks could change the plan
	if err := dec.Decode(&s); err != nil {
		return HostSnapshot{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, d := range s.Daemons {
		if _, err := d.daemon(); err != nil {
			return HostSnapshot{}, fmt.Errorf("%s: %w", file, err)
		}
	}
	return s, nil
}

// Admit is the cluster port's default allow set as the snapshot's host had
// it, for loading the configuration as that host did.
func (s HostSnapshot) Admit() Admit {
	return func(*config.Agent) []netip.Prefix { return s.ClusterAdmitted }
}

// Held says which VIPs the running agent held when the snapshot was taken
// (none without an answer).
func (s HostSnapshot) Held() func(netip.Addr) bool {
	return func(v netip.Addr) bool { return slices.Contains(s.HeldVIPs, v) }
}

// PlanFromSnapshot is PlanFor on the host and state directory s recorded:
// no kernel and no file but s is read.
func PlanFromSnapshot(ctx context.Context, cfg *LoadedConfig, s HostSnapshot, held func(netip.Addr) bool) ([]planner.Op, error) {
	k := s.kernel()
	if cfg.Agent.Cluster == nil {
		k.Announcer = nil // as plan on the host: a director alone never announces
	}
	overrides := planner.Overrides{}
	for _, ov := range s.Overrides {
		if !ov.Empty() {
			overrides[ov.Key()] = ov
		}
	}
	var owned planner.Ownership
	for _, key := range s.OwnedServices {
		owned.Services = append(owned.Services, key.key())
	}
	slices.SortFunc(owned.Services, ipvs.ServiceKey.Compare)
	return planWith(ctx, cfg, k, owned, overrides, planner.Ownership{Addresses: s.OwnedAddresses}, held)
}
