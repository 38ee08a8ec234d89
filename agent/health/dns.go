package health

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsChecker asks one question over UDP and checks the reply's RCODE and,
// optionally, that the answers hold an expected address.
type dnsChecker struct {
	dial   Dialer
	dst    netip.AddrPort // of Check; probe takes its own
	query  []byte         // the packed query; its first two bytes (the ID) change per run
	q      dnsmessage.Question
	rcode  dnsmessage.RCode
	answer netip.Addr // zero: not checked
}

func newDNSChecker(dial Dialer, dst netip.AddrPort, c *Check) (*dnsChecker, error) {
	name := c.Query
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	n, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("bad query name %q: %v", c.Query, err)
	}
	qtype := dnsmessage.TypeA
	switch strings.ToUpper(c.QueryType) {
	case "A":
	case "AAAA":
		qtype = dnsmessage.TypeAAAA
	case "":
		if c.ExpectAnswer.Is6() && !c.ExpectAnswer.Is4In6() {
			qtype = dnsmessage.TypeAAAA
		}
	default:
		return nil, fmt.Errorf("query type %q: only A and AAAA", c.QueryType)
	}
	if c.ExpectRcode < 0 || c.ExpectRcode > 15 {
		return nil, fmt.Errorf("rcode %d out of range 0-15", c.ExpectRcode)
	}
	q := dnsmessage.Question{Name: n, Type: qtype, Class: dnsmessage.ClassINET}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, fmt.Errorf("bad query name %q: %v", c.Query, err)
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, err
	}
	return &dnsChecker{
		dial:   dial,
		dst:    dst,
		query:  msg,
		q:      q,
		rcode:  dnsmessage.RCode(c.ExpectRcode),
		answer: c.ExpectAnswer.Unmap(),
	}, nil
}

func (c *dnsChecker) Check(ctx context.Context) Result { return c.probe(ctx, c.dst) }

func (c *dnsChecker) probe(ctx context.Context, dst netip.AddrPort) Result {
	conn, err := c.dial.DialContext(ctx, "udp", dst.String())
	if err != nil {
		return dialFailed(ctx, "socket", err)
	}
	defer conn.Close()
	stop := setDeadline(ctx, conn)
	defer stop()

	// A fresh random ID per query; with the fresh source port of the
	// connected socket, a spoofed reply must guess both.
	id := uint16(rand.Uint32())
	query := append([]byte{byte(id >> 8), byte(id)}, c.query[2:]...)
	if _, err := conn.Write(query); err != nil {
		return failed(describe(ctx, "send", err))
	}
	buf := datagrams.Get().(*[65536]byte)
	defer datagrams.Put(buf)
	for {
		n, err := conn.Read(buf[:])
		if err != nil {
			return failed(describe(ctx, "reply", err))
		}
		res, mine := c.judge(buf[:n], id)
		if mine {
			return res
		}
		// Not a reply to this query (a stray or forged datagram): keep
		// waiting until the deadline, as a resolver would.
	}
}

// judge checks one reply; mine is false when msg does not answer the query
// at all.
func (c *dnsChecker) judge(msg []byte, id uint16) (res Result, mine bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.ID != id || !h.Response {
		return Result{}, false
	}
	q, err := p.Question()
	if err != nil || q.Type != c.q.Type || q.Class != c.q.Class || !strings.EqualFold(q.Name.String(), c.q.Name.String()) {
		return Result{}, false
	}
	if h.RCode != c.rcode {
		return failed(fmt.Sprintf("rcode %s, want %s", rcodeName(h.RCode), rcodeName(c.rcode))), true
	}
	if !c.answer.IsValid() {
		return Result{OK: true}, true
	}
	if h.Truncated {
		return failed("reply truncated; answers not checked"), true
	}
	if err := p.SkipAllQuestions(); err != nil {
		return failed("malformed reply: " + err.Error()), true
	}
	for {
		rh, err := p.AnswerHeader()
		if err == dnsmessage.ErrSectionDone {
			return failed(fmt.Sprintf("no %s record %s in the answer", strings.TrimPrefix(c.q.Type.String(), "Type"), c.answer)), true
		}
		if err != nil {
			return failed("malformed reply: " + err.Error()), true
		}
		var got netip.Addr
		switch rh.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return failed("malformed reply: " + err.Error()), true
			}
			got = netip.AddrFrom4(r.A)
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return failed("malformed reply: " + err.Error()), true
			}
			got = netip.AddrFrom16(r.AAAA).Unmap()
		default:
			if err := p.SkipAnswer(); err != nil {
				return failed("malformed reply: " + err.Error()), true
			}
			continue
		}
		if got == c.answer {
			return Result{OK: true}, true
		}
	}
}

// rcodeName is "NXDOMAIN" rather than dnsmessage's "RCodeNameError".
func rcodeName(r dnsmessage.RCode) string {
	names := [...]string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"}
	if int(r) < len(names) {
		return names[r]
	}
	return fmt.Sprintf("RCODE%d", int(r))
}
