package arp

import (
	"context"
	"strings"
)

// Sysctls reads and writes kernel parameters below /proc/sys of the current
// network namespace. Keys are paths below /proc/sys with slashes
// ("net/ipv4/conf/eth0/arp_ignore"), so interface names containing dots need
// no escaping. Implementations must be safe for concurrent use.
type Sysctls interface {
	// Get returns the value without its trailing newline. A key that does
	// not exist (e.g. the conf folder of a missing interface) fails with an
	// error wrapping ErrNotFound.
	Get(ctx context.Context, key string) (string, error)
	// Set writes value. It never creates a key: a missing one fails with an
	// error wrapping ErrNotFound, as the kernel does.
	Set(ctx context.Context, key, value string) error
}

// ConfKey is the IPv4 per-interface key named param of dev ("all" for the
// setting the kernel combines with every interface's own one):
// ConfKey("eth0", "arp_ignore") is "net/ipv4/conf/eth0/arp_ignore".
func ConfKey(dev, param string) string {
	return "net/ipv4/conf/" + dev + "/" + param
}

// ConfKeyDevice returns the interface of a key made by ConfKey, or "" for
// any other key.
func ConfKeyDevice(key string) string {
	rest, ok := strings.CutPrefix(key, "net/ipv4/conf/")
	if !ok {
		return ""
	}
	dev, _, _ := strings.Cut(rest, "/")
	return dev
}
