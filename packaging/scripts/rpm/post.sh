#!/bin/sh
# lvsd %post (rpm): 1 = install, 2 or more = upgrade. What %systemd_post
# does (preset on install, so the distribution's policy decides whether
# lvsd is enabled; Fedora's and SUSE's disable it), then a restart of a
# running lvsd on upgrade, as %systemd_postun_with_restart would.
set -e

# The unit may not load kernel modules: load them now, as
# systemd-modules-load will at every boot, so lvsd can start without a reboot.
modules=$(sed -e 's/#.*//' /usr/lib/modules-load.d/lvsd.conf)
# shellcheck disable=SC2086 # one module per word
modprobe -a $modules 2>/dev/null || true

# This director's identity (docs/cluster.md, "Identities"): made once,
# never replaced. Its public key (lvsd keygen --public) goes under the
# node name in cluster.directors on every director; lvsd signs with it as
# soon as it exists.
if [ ! -e /etc/lvsd/identity.key ]; then
	lvsd keygen --out /etc/lvsd/identity.key >/dev/null ||
		echo "lvsd: could not make /etc/lvsd/identity.key; make it with 'lvsd keygen'" >&2
fi

if [ "$1" -eq 1 ]; then
	systemctl --no-reload preset lvsd.service >/dev/null 2>&1 || true
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ "$1" -ge 2 ]; then
		# Only if it runs. Restarting costs no connection: the kernel state
		# stays, and the new lvsd adopts it. In a cluster the restart hold
		# first asks the other directors to keep this one's VIPs where they
		# are meanwhile (a director alone, or a running lvsd of a release
		# without the hold, refuses it: the VIPs move as before).
		if systemctl --quiet is-active lvsd.service; then
			lvsd restart-hold >/dev/null 2>&1 || true
		fi
		systemctl try-restart lvsd.service || true
	fi
fi

if [ "$1" -eq 1 ] && ! systemctl --quiet is-enabled lvsd.service 2>/dev/null; then
	echo "lvsd: set the interface in /etc/lvsd/lvsd.yaml, add services to /etc/lvsd/services.d/"
	echo "lvsd: (examples in /usr/share/doc/lvsd/examples/), check them with 'lvsd check',"
	echo "lvsd: then run 'systemctl enable --now lvsd'."
fi
exit 0
