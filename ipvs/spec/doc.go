// Package spec holds what the kernel's IPVS tables hold, as values: virtual
// services and their destinations, tunnel options, the sync daemons'
// settings, the idle timeouts, the connection table's entries and the
// net.ipv4.vs sysctls lvsd sets. It has no kernel access and links no
// kernel library, so that planning and configuration can compute and
// compare desired state with it; package ipvs reads and writes the kernel
// in these terms (and names them too).
package spec
