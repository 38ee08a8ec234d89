// Package health probes backends and decides, with rise/fall hysteresis,
// which of them are healthy and what weight they ask for.
//
// A Monitor is given the full wanted set of Targets with Set and runs one
// goroutine per target (the only owner of that target's hysteresis state).
// Each goroutine runs rounds: all of the target's checks concurrently, each
// bounded by its own timeout; a round passes when at least AtLeast checks
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
// up), so 1,000 targets checked every second spread over the whole second.
//
// Cost at scale. Nothing is kept open between rounds: every tcp, http and
// https check dials a fresh connection with a plain net.Dialer (so it leaves
// from the agent's own network namespace), sends "Connection: close" and
// closes it when the round ends. A target therefore holds at most one file
// descriptor per check, and only while the check runs; with keep-alive the
// agent would instead hold an idle connection to every backend and test
// only an old connection rather than the backend's accept path. HTTP is
// spoken directly over the connection (http.ReadResponse), not through
// http.Client: no transport, connection pool or per-connection goroutines,
// no redirects followed (a 3xx is judged by the status range like any other
// status), response headers capped at 64 KiB and bodies read up to 64 KiB.
// ICMP uses one shared socket per address family, owned by the Monitor, with
// replies matched to probes by sequence number.
//
// Everything read from the network is untrusted: sizes are capped, the
// weight header is parsed strictly, and invalid values are logged once per
// distinct value and otherwise ignored.
package health
