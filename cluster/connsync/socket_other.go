//go:build !linux

package connsync

func openSockets(Config) (datagramReader, datagramWriter, error) {
	return nil, nil, ErrNotSupported
}
