package main

import (
	"context"
	"log/slog"

	"github.com/lvsd/lvsd/agent"
)

// startCluster joins the director cluster configured in cfg and returns who
// holds which VIP. Without a cluster (the only mode so far) this director
// holds every VIP: nil ownership.
func startCluster(ctx context.Context, cfg *agent.Config, log *slog.Logger) (agent.VIPOwnership, error) {
	return nil, nil
}
