#!/bin/sh
# lvsd %preun (rpm): 0 = erase, 1 = upgrade. As %systemd_preun: an erase
# stops and disables the unit; an upgrade keeps lvsd running until the new
# package's %post restarts it.
set -e

# Stopping leaves IPVS, nftables and the VIPs in place (traffic goes on);
# docs/operations.md says how to remove them.
if [ "$1" -eq 0 ]; then
	systemctl --no-reload disable --now lvsd.service >/dev/null 2>&1 || true
fi
exit 0
