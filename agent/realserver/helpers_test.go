package realserver

import (
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// build is planner.BuildRealServer for configurations that cannot fail to
// render.
func build(rs config.RealServer, vips []netip.Addr) planner.RealServerDesired {
	d, err := planner.BuildRealServer(rs, vips)
	if err != nil {
		panic(err)
	}
	return d
}

// opStrings describes ops as the real server logs and `lvsd cleanup`
// print them.
func opStrings(ops []planner.Op) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = o.Describe()
	}
	return out
}

func tunnelConfig(encap config.Encap, vips ...string) config.RealServer {
	t := config.RealServerTunnel{Encap: encap, MTU: config.DefaultTunnelMTU, ClampMSS: true}
	if encap == config.EncapGUE {
		t.Port = 6080
	}
	for _, v := range vips {
		t.VIPs = append(t.VIPs, netip.MustParseAddr(v))
	}
	return config.RealServer{ARPInterfaces: []string{"eth0"}, Tunnel: t}
}
