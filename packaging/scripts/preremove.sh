#!/bin/sh
# lvsd preremove: deb prerm (remove | upgrade NEW-VERSION | …) and rpm %preun
# (0 = erase, 1 = upgrade). Upgrades keep lvsd running until the new
# package's postinstall restarts it.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		# Stopping leaves IPVS, nftables and the VIPs in place (traffic goes
		# on); docs/operations.md says how to remove them.
		systemctl disable --now lvsd.service || true
	fi
	;;
esac
exit 0
