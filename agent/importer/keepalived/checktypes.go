package keepalived

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/lvsd/lvsd/agent/importer"
)

// statusCode reads `status_code 200 | 200-299 [...]`: lvsd takes one range.
func (c *converter) statusCode(n *Node, k *check) {
	if len(n.Args) == 0 {
		c.notMapped(n, "status_code takes a status or range")
		return
	}
	lo, hi := 999, 0
	for _, a := range n.Args {
		from, to, isRange := strings.Cut(a, "-")
		f, err1 := strconv.Atoi(from)
		t, err2 := f, error(nil)
		if isRange {
			t, err2 = strconv.Atoi(to)
		}
		if err1 != nil || err2 != nil || f < 100 || t > 599 || t < f {
			c.notMapped(n, "%q is not an HTTP status or range", a)
			return
		}
		lo, hi = min(lo, f), max(hi, t)
	}
	k.expect = strconv.Itoa(lo)
	if hi != lo {
		k.expect += "-" + strconv.Itoa(hi)
	}
	if len(n.Args) > 1 {
		c.approx(n, "expect: %s, the span of %s (lvsd takes one range)", k.expect, strings.Join(n.Args, " "))
		return
	}
	c.mapped(n, "expect: %s (keepalived's default 200-299; lvsd's 200-399)", k.expect)
}

func (c *converter) miscCheck(n *Node, base check) []check {
	base.typ, base.port = "exec", 0
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "misc_path":
			words, err := splitCommand(strings.Join(ch.Args, " "))
			if err != nil || len(words) == 0 {
				c.notMapped(ch, "%q is not a command line", strings.Join(ch.Args, " "))
				continue
			}
			base.command = words
			c.mapped(ch, "command: %s (run without a shell; it gets LVSD_TARGET_ADDR and LVSD_TARGET_PORT)", importer.Texts(words))
		case "misc_dynamic":
			c.approx(ch, "lvsd reads only exit 0 (healthy) or not; a weight from the exit code is not read — weighted checks are http checks with weight_header")
		case "user":
			c.notMapped(ch, "the check runs as lvsd's own account unless the service file says user: NAME (an account of this host, looked up when the file is read); add it after the import")
		}
	}
	if len(base.command) == 0 {
		c.notMapped(n, "MISC_CHECK without misc_path: nothing to run")
		return nil
	}
	c.mapped(n, "check type exec")
	return []check{base}
}

// splitCommand splits a misc_path as keepalived does: words separated by
// spaces, 'single' and "double" quotes grouping.
func splitCommand(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0 && ch == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(ch)
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == ' ' || ch == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

func (c *converter) dnsCheck(n *Node, base check) []check {
	base.typ = "dns"
	if base.port == 0 {
		base.port = 53
	}
	base.query = "."
	qtype := "SOA"
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "name":
			if len(ch.Args) == 1 {
				base.query = ch.Args[0]
				c.mapped(ch, "query: %s", base.query)
			}
		case "type":
			if len(ch.Args) == 1 {
				qtype = strings.ToUpper(ch.Args[0])
				if qtype == "A" {
					c.mapped(ch, "lvsd's dns check asks for A")
				} else {
					c.approx(ch, "lvsd's dns check asks for A, not %s", qtype)
				}
			}
		}
	}
	if base.query == "." {
		c.approx(n, "check type dns; keepalived's default asks for the root's SOA, lvsd asks for A records of query: write a name the backend answers")
		return []check{base}
	}
	c.mapped(n, "check type dns")
	return []check{base}
}

func (c *converter) udpCheck(n *Node, base check) []check {
	base.typ = "udp"
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "payload", "require_reply":
			text, ok := printableHex(strings.Join(ch.Args, ""))
			if !ok {
				c.notMapped(ch, "lvsd's udp check sends and looks for text; %s is not printable text in hex", strings.Join(ch.Args, " "))
				continue
			}
			if ch.Keyword == "payload" {
				base.send = text
				c.mapped(ch, "send: %q", text)
			} else {
				base.receive = text
				c.mapped(ch, "receive: %q (a substring of the reply)", text)
			}
		case "min_reply_length", "max_reply_length":
			c.notMapped(ch, "lvsd's udp check looks for a substring, not a length")
		}
	}
	c.mapped(n, "check type udp (a reply is needed; an ICMP port unreachable fails it)")
	return []check{base}
}

// printableHex decodes keepalived's hex payload into text when it is
// printable.
func printableHex(s string) (string, bool) {
	b, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s), "0x"))
	if err != nil || len(b) == 0 {
		return "", false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t' {
			return "", false
		}
	}
	return string(b), true
}

// methodOf names an lvs_method as lvsd's forwarding.
func methodOf(m string) string {
	switch strings.ToUpper(m) {
	case "NAT":
		return "nat"
	case "DR":
		return "dr"
	case "TUN":
		return "tunnel"
	}
	return m
}
