package clidoc

import (
	"fmt"
	"io"
	"strings"

	"github.com/lvsd/lvsd/docs"
)

// ConfigManPage writes lvsd.yaml(5), the configuration files'
// man page: docs/configuration.md in roff.
func ConfigManPage(w io.Writer, version string) error {
	fmt.Fprintf(w, ".TH LVSD.YAML 5 \"\" \"lvsd %s\" \"File Formats\"\n", roffText(version))
	fmt.Fprint(w, `.SH NAME
lvsd.yaml \- configuration of lvsd: the agent file and the service files
.SH SYNOPSIS
.I /etc/lvsd/lvsd.yaml
.br
.IR /etc/lvsd/services.d/ *.yaml
.SH DESCRIPTION
`)
	mdToRoff(w, docs.Configuration)
	_, err := fmt.Fprint(w, `.SH SEE ALSO
.BR lvsd (8),
.BR ipvsadm (8),
/usr/share/doc/lvsd/configuration.md (this page, with its links)
`)
	return err
}

// ManPage writes lvsd(8), the command's man page.
func (c CLI) ManPage(w io.Writer) error {
	roff := strings.NewReplacer(`\`, `\e`, "-", `\-`, "'", `\(aq`)
	fmt.Fprintf(w, ".TH LVSD 8 \"\" \"lvsd %s\" \"System Administration\"\n", roff.Replace(c.Version))
	fmt.Fprint(w, `.SH NAME
lvsd \- LVS director and real\-server agent
.SH SYNOPSIS
.B lvsd
.I command
.RB [ \-\-config
.IR file ]
.RI [ options ]
.SH DESCRIPTION
.B lvsd
keeps the kernel's IPVS load balancer in step with YAML service files.
As a director it turns each service into IPVS virtual services (direct routing, NAT or FULLNAT with
nftables), checks backends, drains a removed backend before deleting it, and adopts what it finds on
restart, so reloading or restarting costs no established connection.
As a real server it holds the VIPs on the loopback interface, sets the ARP sysctls direct routing needs,
and serves a weight endpoint the directors probe.
.PP
Under systemd
.B lvsd run
is the
.B lvsd.service
unit: it reports readiness after its first reconcile pass, feeds the watchdog, logs to the journal with
one field per attribute (SERVICE, OP, ERR, ...), and serves Prometheus metrics on
.B metrics.listen
(default 127.0.0.1:9610).
.SH COMMANDS
`)
	c.writeManCommands(w, roff)
	_, err := fmt.Fprintf(w, `.PP
Every command takes
.B \-\-config
.IR file ,
the agent file (default %s).
Flags may stand before or after a command\(aqs arguments, and a long flag may be given with one dash
.RB ( \-config ,
as before).
.B \-\-json
output (check, plan, status, explain, backend) is an object whose
.B schema
field is the version of its format, now 1.
.SH SIGNALS
.TP
.B SIGHUP
reload the configuration; an invalid one is logged and the last good one stays in force
.RB ( "systemctl reload lvsd" ).
Edited files are also noticed within seconds without a signal.
.TP
.BR SIGTERM ", " SIGINT
stop, leaving the kernel state in place.
.SH FILES
.TP
.I /etc/lvsd/lvsd.yaml
the agent file
.TP
.I /etc/lvsd/services.d/
service files, every *.yaml and *.yml
.TP
.I /var/lib/lvsd/
state: the record of the kernel objects lvsd created, and the operator's backend overrides
.TP
.I /run/lvsd/lvsd.sock
local API socket (mode 0600) used by status, explain, drain, undrain and backend
.SH EXIT STATUS
0 on success; 1 on any error (with a message on stderr); 2 for a wrong command line (unknown command,
flag or arguments); 3 when no agent answers on the local socket (as an LSB init script\(aqs status action).
.B "lvsd plan \-\-detailed\-exitcode"
exits 0 when the host matches the configuration, 2 when there are changes to make, 1 on an error.
.SH SEE ALSO
.BR lvsd.yaml (5),
.BR ipvsadm (8),
.BR systemctl (1),
.BR journalctl (1),
/usr/share/doc/lvsd/
`, roff.Replace(c.DefaultConfig))
	return err
}

// writeManCommands writes the COMMANDS section's entries: each command
// with its usage and flags.
func (c CLI) writeManCommands(w io.Writer, roff *strings.Replacer) {
	for _, cmd := range c.Commands {
		fmt.Fprintf(w, ".TP\n.B %s\n%s\n", roff.Replace(cmd.Name), roff.Replace(cmd.Usage))
		for _, f := range cmd.Flags {
			if f.Name == "config" {
				continue
			}
			name := ".B \\-\\-" + roff.Replace(f.Name)
			if takesValue(f) {
				name = ".BI \"\\-\\-" + roff.Replace(f.Name) + " \" value"
			}
			fmt.Fprintf(w, ".RS\n.TP\n%s\n%s\n.RE\n", name, roff.Replace(f.Usage))
		}
	}
}
