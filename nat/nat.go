package nat

import (
	"context"
	"errors"
)

// Interface is what the agent needs to keep lvsd's nftables tables in step.
// Implementations must be safe for concurrent use and touch nothing outside
// "table ip lvsd" and "table ip6 lvsd".
type Interface interface {
	// Apply makes both tables hold exactly rs, whether or not they exist,
	// in one kernel transaction: on error nothing changed. When the tables
	// already hold rs (same digest) it writes nothing.
	Apply(ctx context.Context, rs Ruleset) error
	// Installed returns the digest of the ruleset the tables hold, or ""
	// when a table is missing or was not written by lvsd (e.g. by hand).
	Installed(ctx context.Context) (string, error)
	// Remove deletes both tables in one transaction. Tables that do not
	// exist are not an error.
	Remove(ctx context.Context) error
}

// Watcher is implemented by the tables that can tell when someone changed
// them: Watch's channel receives (coalesced) after nftables objects were
// deleted, by lvsd or anyone else (`nft flush ruleset`), so the caller
// checks its tables at once instead of at its next audit. The channel is
// closed when ctx ends or the watch fails.
type Watcher interface {
	Watch(ctx context.Context) (<-chan struct{}, error)
}

// ErrNotSupported is wrapped by errors saying the kernel (or the process's
// privileges) cannot do what lvsd needs: no nf_tables, no IPVS sysctls, no
// CAP_NET_ADMIN.
var ErrNotSupported = errors.New("not supported")

// errZeroRuleset is returned for a Ruleset that did not come from Render.
var errZeroRuleset = errors.New("nat: zero Ruleset (use Render, e.g. Render(Spec{}) for no rules)")
