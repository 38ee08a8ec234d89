// Package hooks runs the operator's event hooks (keepalived's notify
// scripts): a program named in lvsd.yaml is run when this director takes or
// releases a VIP, or when a backend becomes healthy or unhealthy, with the
// details in its environment (LVSD_EVENT, LVSD_STATE, LVSD_VIP, ...).
//
// A Runner never blocks the code that reports an event: Notify puts the
// event in a bounded queue per hook and returns; a full queue drops its
// oldest event and counts it. Each hook has its own goroutine, which runs
// one process at a time, in the order the events came, and kills the
// process group of a run that outlives the timeout. A hook is a program,
// not a shell command line: no shell, no arguments.
package hooks
