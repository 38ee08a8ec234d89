// Package metrics serves an agent's Prometheus metrics over HTTP, for both
// roles: the collectors come from the role (views.Collector,
// realserver.Collector); the Go runtime and process collectors are added.
package metrics

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
)

// Serve answers GET /metrics on l with cs plus the Go runtime and process
// collectors until ctx ends.
func Serve(ctx context.Context, l net.Listener, log *slog.Logger, cs ...prometheus.Collector) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
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
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Info("serving metrics", "listen", l.Addr().String(), "path", "/metrics")
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics server stopped", "err", err)
	}
	<-stopped
}

// Listen opens addr for Serve. A port that cannot be opened is logged and
// nil returned: an agent's job comes first, and Prometheus shows the
// target down.
func Listen(addr string, log *slog.Logger) net.Listener {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("cannot serve metrics; going on without them", "listen", addr, "err", err)
		return nil
	}
	return l
}
