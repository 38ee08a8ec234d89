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
	# The record of what lvsd created in the kernel. Without it a
	# reinstalled lvsd adopts only the services its files still configure.
	rm -rf /var/lib/lvsd
	;;
esac
exit 0
