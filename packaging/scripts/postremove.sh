#!/bin/sh
# lvsd postremove: deb postrm (remove | purge | upgrade | …) and rpm %postun
# (0 = erase, 1 = upgrade).
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
purge)
	# The enabled state kept since the removal goes now (deb-systemd-helper
	# when there, else the link systemctl enable made).
	if command -v deb-systemd-helper >/dev/null; then
		deb-systemd-helper purge lvsd.service >/dev/null || true
	fi
	rm -f /etc/systemd/system/multi-user.target.wants/lvsd.service
	# The service files the operator added (dpkg removes only the
	# conffiles) and the record of what lvsd created in the kernel: without
	# it a reinstalled lvsd adopts only the services its files configure.
	rm -rf /etc/lvsd /var/lib/lvsd
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
exit 0
