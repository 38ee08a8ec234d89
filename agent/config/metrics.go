package config

import (
	"net"
	"net/netip"
	"strconv"
)

// DefaultMetricsListen is where /metrics is served unless the agent file
// says otherwise: loopback only. A director's interface holds the VIPs, so
// ":9610" would also serve the metrics on every VIP, to the clients.
// Prometheus scrapes another address once the operator names it (a
// management address) or through a local agent. 9610 is free among the
// Prometheus default ports that exporters register.
const DefaultMetricsListen = "127.0.0.1:9610"

// metricsListen accepts "off", ":port" or "IP:port"; "" means the default.
func (d *doc) metricsListen(s string) string {
	switch s {
	case "":
		return DefaultMetricsListen
	case "off":
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	_, herr := netip.ParseAddr(host)
	if err != nil || perr != nil || n < 1 || n > 65535 || host != "" && herr != nil {
		d.Errorf("$.metrics.listen", "metrics listen %q is not \":port\", \"IP:port\" or \"off\"", s)
		return ""
	}
	return s
}

// metricsPerBackend is metrics.per_backend, true unless set: a director's
// series per backend, ten of them each, are a million at 10,000 services ×
// 10 backends; false keeps the per-service ones only. A real server has
// no backends, so the key is a director's only.
func (d *doc) metricsPerBackend(role Role, perBackend *bool) bool {
	if perBackend == nil {
		return true
	}
	if role != RoleDirector {
		d.Errorf("$.metrics.per_backend", "metrics.per_backend is for role director; a real server exports no backends")
	}
	return *perBackend
}
