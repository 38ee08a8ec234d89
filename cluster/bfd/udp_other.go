//go:build !linux

package bfd

import (
	"errors"
	"log/slog"
)

func newUDPTransport(*slog.Logger) (Transport, error) {
	return nil, errors.New("bfd: UDP transport needs Linux")
}
