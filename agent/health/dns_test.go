package health

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsResponder is a tiny authoritative server for the tests:
//
//	ok.test.      A 192.0.2.7, AAAA 2001:db8::7
//	cname.test.   CNAME ok.test. then A 192.0.2.7
//	missing.test. NXDOMAIN
//	slow.test.    no reply
//	forged.test.  first a reply with a wrong ID, then the real one
func dnsResponder(t *testing.T, ip string) string {
	pc, err := net.ListenPacket("udp", hostPort(ip, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			name := strings.ToLower(q.Name.String())
			if name == "slow.test." {
				continue
			}
			reply := func(id uint16) []byte {
				rh := dnsmessage.Header{ID: id, Response: true, Authoritative: true}
				if name == "missing.test." {
					rh.RCode = dnsmessage.RCodeNameError
				}
				b := dnsmessage.NewBuilder(nil, rh)
				b.StartQuestions()
				b.Question(q)
				b.StartAnswers()
				hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
				if name == "cname.test." {
					b.CNAMEResource(hdr, dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("ok.test.")})
					hdr.Name = dnsmessage.MustNewName("ok.test.")
				}
				if name != "missing.test." {
					if q.Type == dnsmessage.TypeA {
						b.AResource(hdr, dnsmessage.AResource{A: [4]byte{192, 0, 2, 7}})
					} else {
						b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::7").As16()})
					}
				}
				msg, _ := b.Finish()
				return msg
			}
			if name == "forged.test." {
				pc.WriteTo(reply(h.ID+1), from)
			}
			pc.WriteTo(reply(h.ID), from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestDNS(t *testing.T) {
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			addr := dnsResponder(t, ip)
			a7 := netip.MustParseAddr("192.0.2.7")
			tests := []struct {
				name   string
				c      Check
				ok     bool
				reason string
			}{
				{"NOERROR", Check{Query: "ok.test"}, true, ""},
				{"fully qualified name", Check{Query: "OK.test."}, true, ""},
				{"NXDOMAIN fails by default", Check{Query: "missing.test"}, false, "rcode NXDOMAIN, want NOERROR"},
				{"NXDOMAIN expected", Check{Query: "missing.test", ExpectRcode: 3}, true, ""},
				{"expected address", Check{Query: "ok.test", ExpectAnswer: a7}, true, ""},
				{"expected address after a CNAME", Check{Query: "cname.test", ExpectAnswer: a7}, true, ""},
				{"other address", Check{Query: "ok.test", ExpectAnswer: netip.MustParseAddr("192.0.2.8")}, false, "no A record 192.0.2.8"},
				{"AAAA inferred from the expected address", Check{Query: "ok.test", ExpectAnswer: netip.MustParseAddr("2001:db8::7")}, true, ""},
				{"AAAA asked", Check{Query: "ok.test", QueryType: "aaaa"}, true, ""},
				{"no reply", Check{Query: "slow.test", Timeout: 100 * time.Millisecond}, false, "reply: timed out"},
				{"reply with a wrong ID ignored", Check{Query: "forged.test", ExpectAnswer: a7}, true, ""},
				{"unsupported type", Check{Query: "ok.test", QueryType: "MX"}, false, "invalid check: query type"},
			}
			for _, tt := range tests {
				tt.c.Type = "dns"
				res, _ := probe(t, addr, tt.c)
				if res.OK != tt.ok || !strings.Contains(res.Reason, tt.reason) {
					t.Errorf("%s: got %v %q, want %v %q", tt.name, res.OK, res.Reason, tt.ok, tt.reason)
				}
			}
			res, _ := probe(t, closedPort(t, "udp", ip), Check{Type: "dns", Query: "ok.test"})
			wantResult(t, res, false, "connection refused")
		})
	}
}

func TestDNSJudgeUntrusted(t *testing.T) {
	c, err := newDNSChecker(nil, netip.MustParseAddrPort("127.0.0.1:53"), &Check{Query: "ok.test", ExpectAnswer: netip.MustParseAddr("192.0.2.7")})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range [][]byte{nil, {0, 1}, []byte("garbage that is not dns at all")} {
		if _, mine := c.judge(msg, 1); mine {
			t.Errorf("%q taken as a reply", msg)
		}
	}
	// A reply to another question is not ours either.
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, Response: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("other.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	if _, mine := c.judge(msg, 1); mine {
		t.Error("reply to another name taken")
	}
}
