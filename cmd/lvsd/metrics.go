package main

import (
	"context"
	"log/slog"

	"github.com/lvsd/lvsd/agent"
)

// startMetrics serves the agent's metrics when cfg asks for it. Metrics are
// not implemented yet (issue 8); nothing is served.
func startMetrics(ctx context.Context, cfg *agent.Config, a *agent.Agent, log *slog.Logger) error {
	return nil
}
