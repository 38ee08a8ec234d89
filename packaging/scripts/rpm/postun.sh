#!/bin/sh
# lvsd %postun (rpm): 0 = erase, 1 = upgrade. rpm removes the files it
# installed (a changed /etc/lvsd/lvsd.yaml stays as .rpmsave) and the
# folders left empty; the operator's files in /etc/lvsd and lvsd's record
# in /var/lib/lvsd stay (rpm has no purge).
set -e

if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
