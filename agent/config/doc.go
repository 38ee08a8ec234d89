// Package config reads lvsd's YAML: the agent file (/etc/lvsd/lvsd.yaml) and
// the service files of its services directory. Decoding is strict (unknown
// keys are errors) and every error names the file, line and column it is
// about, so an operator can fix a file without guessing. It returns typed,
// validated values (netip addresses, enums) and never touches the host.
// Reading the services directory as a set, the checks between its
// services, and keeping what was read for the next reload are
// servicesdir's, which builds on this package.
package config
