package spec

import "fmt"

// SyncSysctls are the net.ipv4.vs sysctls that decide which connections a
// master sync daemon sends, and what a director does with TCP and SCTP
// packets of connections it has no entry for. They are per network namespace.
type SyncSysctls struct {
	// Threshold and Period are sync_threshold ("3 50" by default): with
	// Period > 0 a connection is sent when its count of client packets
	// modulo Period equals Threshold; with Period 0 see RefreshPeriod.
	Threshold, Period int
	// RefreshPeriod is sync_refresh_period in seconds (default 0).
	RefreshPeriod int
	// PersistTemplatesOnly is sync_persist_mode=1: under persistence only
	// the templates are sent, not the connections.
	PersistTemplatesOnly bool
	// SloppyTCP and SloppySCTP let a director create a connection entry
	// from any packet, not only from a SYN (SCTP: INIT).
	SloppyTCP, SloppySCTP bool
}

// RecommendedSyncSysctls returns what lvsd sets, "sync_threshold 3 0",
// "sync_refresh_period 10", persist mode 0, both sloppy flags on. Why, from
// ip_vs_sync_conn_needed (ip_vs_sync.c) and its caller ip_vs_in:
//
//   - The master considers a connection only when a packet from the client
//     arrives; server packets and timers never send anything.
//   - TCP is sent only in ESTABLISHED, FIN_WAIT, CLOSE, CLOSE_WAIT and
//     TIME_WAIT; entering any of these but ESTABLISHED is sent at once.
//     Entering ESTABLISHED, later packets and UDP go through sync_threshold.
//   - With the default "3 50" a connection is sent on client packets 3, 53,
//     103...: the handshake has two (SYN, ACK), so a connection whose client
//     has not sent a third packet yet (idle, or the server speaks first) is
//     unknown to the backup and is reset after failover (measured: 10 of 12
//     survived; "2 50" or "3 0" with refresh 10 gave 12 of 12).
//   - With Period 0 and RefreshPeriod R > 0 the packet count is not used: a
//     connection is sent on its first eligible packet (the ACK that
//     establishes it, a UDP flow's first packet) and later on a packet only
//     when its expiry moved by min(R, max(timeout/2, 10 s)) since the last
//     send: at most one record per connection every 10 s. That costs less
//     than one per 50 packets for bulk flows, and keeps the backup's copy of
//     a sparse connection alive: with "2 50" one that sends a packet a minute
//     would be re-sent every 50 minutes, but the copy expires after the
//     15-minute ESTABLISHED timeout. Threshold is then unused (kept at 3).
//   - Persist mode 0: mode 1 would send only persistence templates, and a NAT
//     director needs the connections themselves to translate replies.
//   - Sloppy TCP/SCTP: a director that takes over picks up connections whose
//     sync it missed from their next packet instead of dropping them; with mh
//     the same real server is chosen (measured: DR 12 of 12 without any sync).
func RecommendedSyncSysctls() SyncSysctls {
	return SyncSysctls{Threshold: 3, Period: 0, RefreshPeriod: 10, SloppyTCP: true, SloppySCTP: true}
}

// Validate refuses what the kernel's proc_do_sync_threshold refuses with
// EINVAL: a threshold not below a non-zero period, negative values.
func (s SyncSysctls) Validate() error {
	if s.Threshold < 0 || s.Period < 0 || s.Period > 0 && s.Threshold >= s.Period || s.RefreshPeriod < 0 {
		return fmt.Errorf("invalid IPVS sync sysctls %+v: threshold must be below a non-zero period, none negative", s)
	}
	return nil
}

// Sysctls returns s as kernel parameters (paths below /proc/sys), which the
// agent sets through its one sysctl writer. It also pins sync_version to 1
// and sync_ports to 1: lvsd's relay reads protocol v1 on a single port (with
// sync_ports N the daemons use ports Port..Port+N-1; a change applies once no
// daemon runs, so the agent sets these before it starts the daemons). Vectors
// are space-separated; the kernel prints them tab-separated.
func (s SyncSysctls) Sysctls() map[string]string {
	return map[string]string{
		SysctlPrefix + "sync_version":        "1",
		SysctlPrefix + "sync_ports":          "1",
		SysctlPrefix + "sync_threshold":      fmt.Sprintf("%d %d", s.Threshold, s.Period),
		SysctlPrefix + "sync_refresh_period": fmt.Sprint(s.RefreshPeriod),
		SysctlPrefix + "sync_persist_mode":   boolSysctl(s.PersistTemplatesOnly),
		SysctlPrefix + "sloppy_tcp":          boolSysctl(s.SloppyTCP),
		SysctlPrefix + "sloppy_sctp":         boolSysctl(s.SloppySCTP),
	}
}

// SysctlPrefix is where IPVS keeps its kernel parameters (net.ipv4.vs.*, for
// IPv6 too); they exist only once the ip_vs module is loaded.
const SysctlPrefix = "net/ipv4/vs/"

func boolSysctl(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
