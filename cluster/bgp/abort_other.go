//go:build !linux

package bgp

import "errors"

// shutdownSessions needs Linux's /proc/self/fd.
func shutdownSessions(Config) (int, error) {
	return 0, errors.New("closing BGP sessions without a NOTIFICATION needs Linux")
}
