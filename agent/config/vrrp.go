package config

import (
	"fmt"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// ModeVRRP: the directors elect a master with VRRP version 3 (RFC 5798),
// as keepalived does, so that lvsd and keepalived can run as the two
// directors of a pair during a migration (docs/migrating-from-keepalived.md).
const ModeVRRP ClusterMode = "vrrp"

// VRRP is the `cluster.vrrp` block: one virtual router whose addresses
// are the VIPs of the services.
type VRRP struct {
	VirtualRouterID uint8
	Priority        uint8 // 1-254: 255 (the address owner) is not supported
	// AdvertInterval is Advertisement_Interval, a whole number of
	// centiseconds.
	AdvertInterval time.Duration
	Preempt        bool
	// Interface carries the advertisements; the agent's interface unless
	// set.
	Interface string
}

// Defaults and bounds of the vrrp block (RFC 5798).
const (
	DefaultVRRPPriority  = 100
	DefaultVRRPAdvertInt = time.Second
	minVRRPAdvertInt     = 10 * time.Millisecond
	maxVRRPAdvertInt     = 4095 * 10 * time.Millisecond // 12 bits of centiseconds
)

type rawVRRP struct {
	VirtualRouterID *int         `yaml:"virtual_router_id" range:"1-255"`
	Priority        *int         `yaml:"priority" range:"1-255"`
	AdvertInt       yamldoc.Text `yaml:"advert_int"`
	Preempt         *bool        `yaml:"preempt"`
	Interface       string       `yaml:"interface"`
}

// vrrp validates the vrrp block of c (mode vrrp) against the rest of the
// cluster block, whose memberlist keys VRRP does not use.
func (d *doc) vrrp(c *Cluster, raw *rawCluster, iface string) {
	if c.Mode != ModeVRRP {
		if raw.VRRP != nil {
			d.Errorf("$.cluster.vrrp", "vrrp is for mode vrrp (mode is %s)", c.Mode)
		}
		return
	}
	if raw.ConnSync != nil && raw.ConnSync.Enabled != nil && *raw.ConnSync.Enabled {
		d.Errorf("$.cluster.conn_sync.enabled", "mode vrrp does not sync connections: keepalived's sync daemon and lvsd's relay do not talk to each other (docs/migrating-from-keepalived.md)")
	}
	c.ConnSync.Enabled = false
	if raw.ConfigSync {
		d.Errorf("$.cluster.config_sync", "mode vrrp has no cluster to distribute configuration through: remove config_sync, or use mode active-standby, active-active or ecmp")
	}
	v := raw.VRRP
	if v == nil || v.VirtualRouterID == nil {
		d.Errorf("$.cluster", "mode vrrp needs vrrp.virtual_router_id: the virtual_router_id of the keepalived vrrp_instance to pair with")
		v = &rawVRRP{}
	}
	out := VRRP{Priority: DefaultVRRPPriority, AdvertInterval: DefaultVRRPAdvertInt, Preempt: true, Interface: iface}
	if v.VirtualRouterID != nil {
		out.VirtualRouterID = uint8(*v.VirtualRouterID) // 1-255: its range tag
	}
	if v.Priority != nil {
		if *v.Priority == 255 {
			d.Errorf("$.cluster.vrrp.priority", "priority 255 is for the owner of the VIP addresses, which lvsd never is: use 1-254")
		}
		out.Priority = uint8(*v.Priority)
	}
	if v.AdvertInt != "" {
		iv, err := time.ParseDuration(string(v.AdvertInt))
		switch {
		case err != nil || iv < minVRRPAdvertInt || iv > maxVRRPAdvertInt:
			d.Errorf("$.cluster.vrrp.advert_int", "advert_int %q is not a duration from %s to %s", v.AdvertInt, minVRRPAdvertInt, maxVRRPAdvertInt)
		case iv%minVRRPAdvertInt != 0:
			d.Errorf("$.cluster.vrrp.advert_int", "advert_int %s is not a whole number of centiseconds (VRRP's unit), like 100ms or 1s", iv)
		default:
			out.AdvertInterval = iv
		}
	}
	if v.Preempt != nil {
		out.Preempt = *v.Preempt
	}
	if v.Interface != "" {
		if !isInterfaceName(v.Interface) {
			d.Errorf("$.cluster.vrrp.interface", "interface %q is not an interface name", v.Interface)
		}
		out.Interface = v.Interface
	}
	c.VRRP = out
}

// vrrpUnused are the cluster keys of lvsd's own cluster, accepted in mode
// vrrp (so the block can be prepared for the switch) but not used.
func vrrpUnused(raw *rawCluster) []string {
	var out []string
	add := func(set bool, key string) {
		if set {
			out = append(out, key)
		}
	}
	add(raw.Bind != "", "bind")
	add(raw.Advertise != "", "advertise")
	add(len(raw.Peers) > 0, "peers")
	add(raw.KeyFile != "", "key_file")
	add(raw.Quorum != nil, "quorum")
	add(raw.HeartbeatInterval != "", "heartbeat_interval")
	add(raw.FailureTimeout != "", "failure_timeout")
	return out
}

func (c *Cluster) vrrpWarnings() []string {
	if c.Mode != ModeVRRP || len(c.unusedInVRRP) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("cluster.mode is vrrp: cluster keys %v are for lvsd's own cluster modes and not used until the switch", c.unusedInVRRP)}
}
