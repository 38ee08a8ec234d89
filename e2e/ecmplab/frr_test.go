package ecmplab

import (
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// docNeighbors are the three directors of the lab, both families, BFD on.
func docNeighbors() []Neighbor {
	var ns []Neighbor
	for _, a := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "fd00::2", "fd00::3", "fd00::4"} {
		ns = append(ns, Neighbor{Address: netip.MustParseAddr(a), BFD: true})
	}
	return ns
}

// TestRouterConfigGolden keeps the router configuration the VM tests run
// equal to testdata/router-frr.conf, which docs/ecmp.md shows verbatim.
func TestRouterConfigGolden(t *testing.T) {
	got := RouterConfig(netip.MustParseAddr("10.0.0.10"), docNeighbors())
	golden(t, "testdata/router-frr.conf", got)
	doc, err := os.ReadFile("../../docs/ecmp.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), got) {
		t.Error("docs/ecmp.md does not show testdata/router-frr.conf verbatim")
	}
}

func TestDirectorFRRConfigGolden(t *testing.T) {
	got := DirectorFRRConfig(netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.10"),
		netip.MustParsePrefix("192.0.2.10/32"))
	golden(t, "testdata/director-frr.conf", got)
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update):\n%s", path, got)
	}
}

func TestBFDPeersParse(t *testing.T) {
	out := `Session count: 2
SessionId  LocalAddress                             PeerAddress                             Status         
=========  ============                             ===========                             ======         
2944978126 10.0.0.10                                10.0.0.2                                down           
2986623324 10.0.0.10                                10.0.0.3                                up             
`
	got := BFDPeers(out)
	if len(got) != 2 || got["10.0.0.2"] != "down" || got["10.0.0.3"] != "up" {
		t.Errorf("BFDPeers = %v", got)
	}
}
