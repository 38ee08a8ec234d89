// Package health probes backends and decides, with rise/fall hysteresis,
// which of them are healthy and what weight they ask for.
//
// A Monitor is given the full wanted set of Targets with Set and runs
// rounds of each: all of the target's checks concurrently, each bounded by
// its own timeout, on a goroutine that lives as long as the round (the
// owner of the target's hysteresis state while it runs); a round passes when at least AtLeast checks
// pass (all when AtLeast is 0). The first round decides at once; after that
// Rise passing or Fall failing rounds in a row are needed to flip. Results
// are published into a map that Snapshot copies, and Changed delivers a hint
// whenever a target's health or weight changes.
//
// Scheduling. A target's rounds run every Interval, where Interval is the
// smallest of its checks' intervals: every check runs in every round, so no
// check runs less often than asked, and rounds stay well-defined for the
// rise/fall counts (a per-check schedule would make a slow check's stale
// result count several times towards fall). The config layer gives all
// checks of a target the same interval anyway. The first round of each target
// starts at a random offset within the interval, and later rounds keep that
// phase (a round that overruns skips the missed slots rather than bunching
// up), so 1,000 targets checked every second spread over the whole second
// (in slots, see below; a round may start up to one slot early, never late).
//
// Cost at scale (e2e/healthbench and BenchmarkMonitorStart measure it).
// Between rounds a target is an entry in the queue of one scheduler
// goroutine, not a goroutine of its own: about 250 bytes per target with
// tcp checks, none of them a stack or a timer, as what the targets of a
// group share is held once (spec.go). A round's first check runs on the round's
// goroutine, and only further checks of the same target get one more.
// Rounds start only on a grid of slots shared by all targets (100 ms, or a
// tenth of a shorter interval), so the scheduler wakes once per slot for
// every target due in it rather than once per target: on a VM, where each
// wake-up costs tens of microseconds, that more than halves the CPU time of
// 1,000 checks a second. The jitter still spreads the targets over the ten
// or more slots of their interval.
//
// Checks in flight are bounded (WithMaxInFlight, schedule.go): a round due
// while the bound is reached waits and starts late rather than failing, so
// a host that cannot keep up with what the checks ask checks less often
// instead of running out of file descriptors or CPU. A check that could
// not open its socket for want of a descriptor (EMFILE) says nothing of
// its target: its round is not counted.
//
// Connections. tcp, udp and dns checks open a socket for the round and
// close it at once. http and https checks keep their connection (HTTP
// keep-alive, GET and HEAD only) for up to DefaultReuse rounds, then dial
// anew, so the whole path of a new connection (SYN, a firewall's NEW state,
// the accept queue) is still exercised every tenth round. A kept connection
// is dropped after any failure, when the backend closes it or asks to,
// when a response was not read to its end, and when the target stops; one
// the backend closed while idle is detected and the request sent again on
// a fresh one. So a target holds at most one file descriptor per http
// check, never a pool: 1,000 backends cost 1,000 descriptors (Go raises
// the soft RLIMIT_NOFILE to the hard limit at start). WithReuse(1) dials
// every round and sends "Connection: close" instead. Measured on the 2-vCPU
// build VM with 1,000 backends checked every second: 3.4-4 % of one core
// with reuse, about 10 % without (on loopback the backends' half of every
// handshake is charged to the checker too, so less in production). https
// checks resume their TLS session when they reconnect.
// All connections are dialled with a plain net.Dialer, so they leave from
// the agent's own network namespace.
//
// HTTP is spoken directly over the connection (http.ReadResponse), not
// through http.Client: no transport pool or per-connection goroutines, no
// redirects followed (a 3xx is judged by the status range like any other
// status), status line and headers capped at 64 KiB, and at most 64 KiB of
// the body read. ICMP uses one socket per address family, owned by the
// Monitor, with replies matched to probes by sequence number and source.
//
// Everything read from the network is untrusted: sizes are capped, the
// weight header is parsed strictly, and invalid values are logged once per
// distinct value and otherwise ignored.
package health
