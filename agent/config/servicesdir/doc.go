// Package servicesdir reads the services directory as one validated set of
// services, and keeps what it read so that a reload costs what changed: a
// file is read again only when a stat says it was written, parsed again
// only when its content changed, and only the changed files' services are
// checked against those they may conflict with (same name, or same VIP
// and port). config parses and checks each service file; the checks
// between services are here, with the set they are about.
package servicesdir
