package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lvsd/lvsd/agent"
)

// startMetrics serves /metrics on metrics.listen (agent.Collector plus the
// Go runtime and process collectors) until ctx ends. A listener that cannot
// be opened is logged, not fatal: a busy port must not stop the director
// from keeping the kernel in step (Prometheus then shows the target down).
func startMetrics(ctx context.Context, cfg *agent.Config, a *agent.Agent, log *slog.Logger) error {
	addr := cfg.Agent.MetricsListen
	if addr == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.NewCollector(a, version), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("cannot serve metrics; going on without them", "listen", addr, "err", err)
		return nil
	}
	serveMetrics(ctx, l, reg, log)
	return nil
}

// serveMetrics answers GET /metrics from reg on l until ctx ends.
func serveMetrics(ctx context.Context, l net.Listener, reg *prometheus.Registry, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelError),
		MaxRequestsInFlight: 4, // each scrape reads the kernel
		Timeout:             30 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "lvsd metrics: /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "listen", l.Addr().String(), "path", "/metrics")
}
