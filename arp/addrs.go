package arp

import (
	"context"
	"errors"
	"net/netip"
)

// Addresses manages addresses on network interfaces.
// Implementations must be safe for concurrent use.
type Addresses interface {
	// List returns the addresses on dev.
	List(ctx context.Context, dev string) ([]netip.Prefix, error)
	// Add puts p on dev; adding an address that is already there succeeds.
	Add(ctx context.Context, dev string, p netip.Prefix) error
	// Delete removes p from dev; deleting a missing address fails with ErrNotFound.
	Delete(ctx context.Context, dev string, p netip.Prefix) error
}

// ErrNotFound is wrapped by errors about a missing interface or address.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by errors about adding what is already there.
var ErrExists = errors.New("already exists")
