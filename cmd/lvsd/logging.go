package main

import (
	"io"
	"log/slog"

	"github.com/lvsd/lvsd/agent/config"
)

// newLogger builds the agent's logger from its log settings.
func newLogger(a *config.Agent, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(a.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if a.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
