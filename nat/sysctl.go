package nat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// procSys is where sysctls live; tests point it at a temporary directory.
var procSys = "/proc/sys"

// EnableForwarding turns on IPv4 and/or IPv6 forwarding in the current
// network namespace (/proc/sys/net resolves to the namespace of the thread
// that opens it; the agent runs inside its namespace). A director in NAT or
// FULLNAT mode forwards packets between clients and real servers.
//
// IPv6 forwarding is net.ipv6.conf.all.forwarding, which also switches every
// interface to router behaviour: interfaces with accept_ra=1 stop taking
// router advertisements (use accept_ra=2 where the director needs them).
func EnableForwarding(ctx context.Context, v4, v6 bool) error {
	var errs []error
	if v4 {
		errs = append(errs, setSysctl(ctx, "net/ipv4/ip_forward", "1"))
	}
	if v6 {
		errs = append(errs, setSysctl(ctx, "net/ipv6/conf/all/forwarding", "1"))
	}
	return errors.Join(errs...)
}

// EnableIPVSConntrack sets net.ipv4.vs.conntrack=1 (it covers IPv6 too):
// IPVS then keeps conntrack entries for its connections, which the FULLNAT
// source NAT rules need (nftables NAT works on conntrack entries). The
// sysctl exists only once the ip_vs module is loaded; without it the error
// wraps ErrNotSupported.
func EnableIPVSConntrack(ctx context.Context) error {
	err := setSysctl(ctx, "net/ipv4/vs/conntrack", "1")
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: IPVS not loaded (modprobe ip_vs): %w", ErrNotSupported, err)
	}
	return err
}

// setSysctl writes value unless the sysctl already has it, so that a host
// where it is set (e.g. by sysctl.d) works with a read-only /proc/sys.
func setSysctl(ctx context.Context, key, value string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path := filepath.Join(procSys, key)
	cur, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading sysctl %s: %w", key, err)
	}
	if string(bytes.TrimSpace(cur)) == value {
		return nil
	}
	// O_TRUNC is meaningless for /proc/sys but harmless; the kernel parses
	// the whole write.
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("setting sysctl %s=%s: %w: %w", key, value, ErrNotSupported, err)
		}
		return fmt.Errorf("setting sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// DisableRedirects stops the kernel from sending ICMP redirects on iface. A
// NAT director often forwards replies out of the interface they came in on
// (one-armed): a redirect would then tell real servers to send straight to
// the client, around the director's reverse NAT, and those connections hang.
// The kernel sends redirects if either "all" or the interface allows it, so
// both are cleared. IPv6 has no such sysctl.
func DisableRedirects(ctx context.Context, iface string) error {
	return errors.Join(
		setSysctl(ctx, "net/ipv4/conf/all/send_redirects", "0"),
		setSysctl(ctx, filepath.Join("net/ipv4/conf", iface, "send_redirects"), "0"),
	)
}
