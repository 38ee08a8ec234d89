#!/bin/sh
# lvsd postinstall: deb postinst (configure [OLD-VERSION]) and rpm %post
# (1 = install, 2 = upgrade). See docs/operations.md, "Install and upgrade".
set -e

case "$1" in
configure) if [ -n "$2" ]; then action=upgrade; else action=install; fi ;;
1) action=install ;;
2) action=upgrade ;;
*) exit 0 ;; # deb abort-upgrade, abort-remove, …: nothing was stopped
esac

# The unit may not load kernel modules: load them now, as
# systemd-modules-load will at every boot, so lvsd can start without a reboot.
modules=$(sed -e 's/#.*//' /usr/lib/modules-load.d/lvsd.conf)
# shellcheck disable=SC2086 # one module per word
modprobe -a $modules 2>/dev/null || true

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ "$action" = upgrade ]; then
		# Only if it runs. Restarting costs no connection: the kernel state
		# stays, and the new lvsd adopts it.
		systemctl try-restart lvsd.service || true
	fi
fi

if [ -d /run/systemd/system ] && systemctl is-enabled --quiet lvsd.service 2>/dev/null &&
	! systemctl is-active --quiet lvsd.service; then
	# Reinstalled after a removal that kept the unit enabled (and the
	# configuration): it starts at the next boot; it is not started behind
	# the operator's back now.
	echo "lvsd: lvsd.service is enabled (kept from before the removal): 'systemctl start lvsd' starts it now."
elif [ "$action" = install ]; then
	echo "lvsd: set the interface in /etc/lvsd/lvsd.yaml, add services to /etc/lvsd/services.d/"
	echo "lvsd: (examples in /usr/share/doc/lvsd/examples/), check them with 'lvsd check',"
	echo "lvsd: then run 'systemctl enable --now lvsd'."
fi
exit 0
