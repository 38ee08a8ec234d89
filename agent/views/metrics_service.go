package views

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Series per IPVS service (13, with the five totals over its backends) and
// per backend (9, 10 with checks, 11 while draining; docs/operations.md
// counts them). At 10,000 services × 10 backends the backends' are a
// million series: metrics.per_backend: false keeps the services' only.
var (
	descServiceInfo = desc("service_info", "Always 1; the labels describe the IPVS service lvsd wants.",
		"service", "ipvs_service", "vip", "scheduler", "flags")
	descServiceInKernel = desc("service_in_kernel", "1 if the IPVS service is in the kernel now.", serviceLabels...)
	descVIPHeld         = desc("service_vip_held", "1 if this node holds the service's VIP on its interface now.",
		serviceLabels...)
	descEligible = desc("service_eligible_backends", "Backends taking new connections now (kernel weight above 0); "+
		"0 means the service refuses new clients.", serviceLabels...)
	descServiceBackends = desc("service_backends", "Backends of the IPVS service: configured, and removed ones "+
		"still draining.", serviceLabels...)
	descServiceUnhealthy = desc("service_unhealthy_backends", "Backends failing their health checks now.",
		serviceLabels...)
	descServiceConns = desc("service_connection_entries", "IPVS connection entries of the service's backends now, "+
		"by state, as lvsd_backend_connection_entries.", append(serviceLabels[:2:2], "state")...)
	descServiceConnsTotal = desc("service_connections_total", "Connections IPVS scheduled to the service's "+
		"backends, summed over the backends in the kernel now (deleting a backend lowers it: a counter reset).",
		serviceLabels...)
	descServicePackets = desc("service_packets_total", "Packets IPVS forwarded for the service's backends, "+
		"by direction, summed as lvsd_service_connections_total.", append(serviceLabels[:2:2], "direction")...)
	descServiceBytes = desc("service_bytes_total", "Bytes IPVS forwarded for the service's backends, "+
		"by direction, summed as lvsd_service_connections_total.", append(serviceLabels[:2:2], "direction")...)

	descHealthy = desc("backend_healthy", "0 if the backend fails its health checks, else 1 (backends start "+
		"healthy, before their first round). Absent for backends without checks.", backendLabels...)
	descWeight = desc("backend_weight", "The backend's weight in the kernel now (the effective weight; "+
		"0 while it drains). Absent when it is not in the kernel.", backendLabels...)
	descConfiguredWeight = desc("backend_configured_weight", "The backend's weight in the service file. "+
		"Absent when it is no longer configured (draining).", backendLabels...)
	descOverrideDrained = desc("backend_override_drained", "1 while an operator drains the backend at run time "+
		"(lvsd backend drain: weight 0, its connections go on). Absent otherwise.", backendLabels...)
	descOverrideWeight = desc("backend_override_weight", "The weight an operator set at run time (lvsd backend weight), "+
		"which replaces the file's. Absent without one.", backendLabels...)
	descDraining = desc("backend_draining_seconds", "How long a removed backend has been draining "+
		"(weight 0, waiting for its connections to end). Absent when it is not draining.", backendLabels...)
	descConns = desc("backend_connection_entries", "IPVS connection entries of the backend now, by state "+
		"(active: established TCP; inactive: everything else, UDP included).",
		append(backendLabels[:3:3], "state")...)
	descConnsTotal = desc("backend_connections_total",
		"Connections IPVS scheduled to the backend since it was added.", backendLabels...)
	descPackets = desc("backend_packets_total", "Packets IPVS forwarded for the backend since it was added; "+
		"direction in is client to server, out is the replies (0 for DR and tunnel, which bypass the director).",
		append(backendLabels[:3:3], "direction")...)
	descBytes = desc("backend_bytes_total", "Bytes IPVS forwarded for the backend since it was added, "+
		"by direction as for lvsd_backend_packets_total.", append(backendLabels[:3:3], "direction")...)
)

var (
	serviceDescs = []*prometheus.Desc{descServiceInfo, descServiceInKernel, descVIPHeld, descEligible,
		descServiceBackends, descServiceUnhealthy, descServiceConns, descServiceConnsTotal, descServicePackets,
		descServiceBytes}
	backendDescs = []*prometheus.Desc{descHealthy, descWeight, descConfiguredWeight, descOverrideDrained,
		descOverrideWeight, descDraining, descConns, descConnsTotal, descPackets, descBytes}
)

// collectService exports the series of one IPVS service, from its backend
// counts (no destination needed).
func collectService(s ServiceStatus, gauge func(*prometheus.Desc, float64, ...string),
	counter func(*prometheus.Desc, uint64, ...string)) {
	l := []string{s.Name, s.Key}
	b := s.Backends
	gauge(descServiceInfo, 1, s.Name, s.Key, s.VIP, s.Scheduler, s.Flags)
	gauge(descServiceInKernel, b2f(s.InKernel), l...)
	gauge(descVIPHeld, b2f(s.VIPHeld), l...)
	gauge(descEligible, float64(b.Eligible), l...)
	gauge(descServiceBackends, float64(b.Total), l...)
	gauge(descServiceUnhealthy, float64(b.Unhealthy), l...)
	gauge(descServiceConns, float64(b.ActiveConns), s.Name, s.Key, "active")
	gauge(descServiceConns, float64(b.InactiveConns), s.Name, s.Key, "inactive")
	counter(descServiceConnsTotal, b.Connections, l...)
	counter(descServicePackets, b.PacketsIn, s.Name, s.Key, "in")
	counter(descServicePackets, b.PacketsOut, s.Name, s.Key, "out")
	counter(descServiceBytes, b.BytesIn, s.Name, s.Key, "in")
	counter(descServiceBytes, b.BytesOut, s.Name, s.Key, "out")
}

// collectBackends exports the series of each destination of s.
func collectBackends(s ServiceStatus, gauge func(*prometheus.Desc, float64, ...string),
	counter func(*prometheus.Desc, uint64, ...string)) {
	for _, d := range s.Destinations {
		l := []string{s.Name, s.Key, d.Address}
		if d.Health != "" {
			gauge(descHealthy, b2f(d.Health != healthUnhealthy), l...)
		}
		if d.ConfiguredWeight >= 0 {
			gauge(descConfiguredWeight, float64(d.ConfiguredWeight), l...)
		}
		if ov := d.Override; ov != nil && ov.Drained {
			gauge(descOverrideDrained, 1, l...)
		}
		if ov := d.Override; ov != nil && ov.Weight != nil {
			gauge(descOverrideWeight, float64(*ov.Weight), l...)
		}
		if d.DrainingFor > 0 {
			gauge(descDraining, d.DrainingFor, l...)
		}
		if d.Weight < 0 { // not in the kernel: no kernel numbers
			continue
		}
		gauge(descWeight, float64(d.Weight), l...)
		gauge(descConns, float64(d.ActiveConns), append(l, "active")...)
		gauge(descConns, float64(d.InactiveConns), append(l, "inactive")...)
		counter(descConnsTotal, d.Connections, l...)
		counter(descPackets, d.PacketsIn, append(l, "in")...)
		counter(descPackets, d.PacketsOut, append(l, "out")...)
		counter(descBytes, d.BytesIn, append(l, "in")...)
		counter(descBytes, d.BytesOut, append(l, "out")...)
	}
}
