#!/bin/sh
# lvsd preremove: deb prerm (remove | upgrade NEW-VERSION | …) and rpm %preun
# (0 = erase, 1 = upgrade). Upgrades keep lvsd running until the new
# package's postinstall restarts it.
set -e

# Stopping leaves IPVS, nftables and the VIPs in place (traffic goes on);
# docs/operations.md says how to remove them.
case "$1" in
remove)
	# Debian keeps a removed package's enabled state until purge (as
	# deb-systemd-helper does): a reinstall finds the unit enabled again.
	if [ -d /run/systemd/system ]; then
		systemctl stop lvsd.service || true
	fi
	;;
0)
	# rpm -e: the unit is disabled too, as %systemd_preun does.
	if [ -d /run/systemd/system ]; then
		systemctl disable --now lvsd.service || true
	fi
	;;
esac
exit 0
