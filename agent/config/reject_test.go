package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// serviceErrors loads body as the service file svc.yaml and returns the
// error text with the folder cut off ("" when it loads).
func serviceErrors(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	_, err := loadServiceFiles(writeFile(t, dir, "svc.yaml", body))
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), dir+"/", "")
}

// agentErrors loads body as the agent file lvsd.yaml beside a services.d
// folder and a private key file, and returns the error text with the
// folder cut off.
func agentErrors(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "services.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeKey(t, dir, "cluster.key", testKey+"\n")
	_, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", body))
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), dir+"/", "")
}

const (
	svcHead = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	svcOne  = "backends: [{address: 10.0.0.11}]\n"
	svcGood = svcHead + svcOne
)

// withWeight is a service whose one backend has weight w, on line 5 at
// column 34.
func withWeight(w string) string {
	return svcHead + "backends:\n  - {address: 10.0.0.11, weight: " + w + "}\n"
}

// Issue 14: one case per class of input that was accepted without a word,
// changed meaning, or gave a message without a position; each asserts the
// whole message.
func TestServiceFileRejects(t *testing.T) {
	const wholeNumber = "write whole numbers like 80 or -5 (no 0x, 0o, 0b, leading 0, +, _ or exponent)"
	const misplaced = "a value where none can go: keys of one mapping start in the same column, and items of a list each start with '- '"
	for _, c := range []struct{ name, body, want string }{
		// Every document is checked, whatever precedes it.
		{"empty document first", "---\n---\n" + svcGood + "---\nservice: bad\nvip: 10.0.0.51\nports: [80]\n",
			"svc.yaml:8:1: service \"bad\": backends is required (at least one real server)"},
		{"comment-only document first", "# header\n---\n# nothing\n---\n" + svcGood + "---\nservice: bad\nvip: 10.0.0.51\nports: [80]\n",
			"svc.yaml:10:1: service \"bad\": backends is required (at least one real server)"},
		// Keys are names; the mapping's other errors still show, and the
		// keys it has are not reported missing.
		{"number key", svcHead + "1: x\n" + "backends: [{address: 10.0.0.11, weight: 70000}]\n",
			"svc.yaml:4:1: service \"web\": key 1 is not a name: keys are words like service\n" +
				"svc.yaml:5:41: service \"web\": weight 70000 is not in 0-65535"},
		{"null key", "~: x\n" + svcGood, "svc.yaml:1:1: service \"web\": key ~ is not a name: keys are words like service"},
		{"bool key", "true: x\n" + svcGood, "svc.yaml:1:1: service \"web\": key true is not a name: keys are words like service"},
		{"float key", "1.5: x\n" + svcGood, "svc.yaml:1:1: service \"web\": key 1.5 is not a name: keys are words like service"},
		{"duplicate key", svcHead + "vip: 10.0.0.51\n" + svcOne, "svc.yaml:4:1: service \"web\": key \"vip\" is given twice (first at line 2)"},
		{"unknown key", withWeight("1") + "colour: red\n", "svc.yaml:6:1: service \"web\": unknown key \"colour\" (keys here: service, vip, protocol, ports, forwarding, scheduler, affinity, backends, sorry_server, source_ranges, fullnat, client_address, interface, nat, tunnel, persistence, persistence_on_unhealthy, drain_timeout, health, failover, when_none_healthy, announce)"},
		{"typo key", svcHead + "backends: [{address: 10.0.0.11, wieght: 2}]\n", "svc.yaml:4:33: service \"web\": unknown key \"wieght\" (did you mean weight?)"},
		// Whole numbers.
		{"float in integer", withWeight("0.5"), "svc.yaml:5:34: service \"web\": weight: 0.5 is not a whole number (0-65535)"},
		{"nan", withWeight(".nan"), "svc.yaml:5:34: service \"web\": weight: .nan is not written as a plain decimal number: " + wholeNumber},
		{"inf", withWeight(".inf"), "svc.yaml:5:34: service \"web\": weight: .inf is not written as a plain decimal number: " + wholeNumber},
		{"exponent", withWeight("1e3"), "svc.yaml:5:34: service \"web\": weight: 1e3 is not written as a plain decimal number: " + wholeNumber},
		{"too big for a float", withWeight("1e309"), "svc.yaml:5:34: service \"web\": weight: want a whole number (0-65535), not \"1e309\""},
		{"huge", withWeight("99999999999999999999"), "svc.yaml:5:34: service \"web\": weight 99999999999999999999 is not in 0-65535"},
		{"negative", withWeight("-1"), "svc.yaml:5:34: service \"web\": weight -1 is not in 0-65535"},
		{"hex", withWeight("0x50"), "svc.yaml:5:34: service \"web\": weight: 0x50 is not written as a plain decimal number: " + wholeNumber},
		{"octal", withWeight("017"), "svc.yaml:5:34: service \"web\": weight: 017 is not written as a plain decimal number: " + wholeNumber},
		{"underscore", withWeight("1_000"), "svc.yaml:5:34: service \"web\": weight: 1_000 is not written as a plain decimal number: " + wholeNumber},
		{"plus", withWeight("+5"), "svc.yaml:5:34: service \"web\": weight: +5 is not written as a plain decimal number: " + wholeNumber},
		{"quoted number", withWeight(`"5"`), "svc.yaml:5:34: service \"web\": weight: want a whole number (0-65535), not \"5\""},
		{"boolean for a number", withWeight("true"), "svc.yaml:5:34: service \"web\": weight: want a whole number (0-65535), not true"},
		{"port spelling", "service: web\nvip: 10.0.0.50\nports: [0x50, 080, +81, \" 82\"]\n" + svcOne,
			"svc.yaml:3:9: service \"web\": port \"0x50\" is not a port (1-65535), a range \"from-to\" or \"all\"\n" +
				"svc.yaml:3:15: service \"web\": port \"080\" is not a port (1-65535), a range \"from-to\" or \"all\"\n" +
				"svc.yaml:3:20: service \"web\": port \"+81\" is not a port (1-65535), a range \"from-to\" or \"all\"\n" +
				"svc.yaml:3:25: service \"web\": port \" 82\" is not a port (1-65535), a range \"from-to\" or \"all\""},
		// No Go formatting: these once read "map[from:80 to:90]" and "<nil>".
		{"mapping as a port", "service: web\nvip: 10.0.0.50\nports: [{from: 80, to: 90}]\n" + svcOne,
			"svc.yaml:3:9: service \"web\": ports[0]: want a single value, not a mapping"},
		{"null port", "service: web\nvip: 10.0.0.50\nports: [80, ~]\n" + svcOne, "svc.yaml:3:13: service \"web\": ports[1] has no value: give it one, or leave the key out"},
		{"decimal ratio", svcGood + "failover: {ratio: .nan}\n", "svc.yaml:5:19: service \"web\": ratio: .nan is not a decimal number like 0.5"},
		// Text is text as written.
		{"numeric name", "service: 1.0\nvip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:1:10: service: 1.0 is a number, not text: write \"1.0\" in quotes if you mean the text"},
		{"boolean name", "service: yes\n" + strings.TrimPrefix(svcGood, "service: web\n") + "---\nservice: true\nvip: 10.0.0.51\nports: [80]\n" + svcOne,
			"svc.yaml:6:10: service: true is a boolean, not text: write \"true\" in quotes if you mean the text"},
		{"date", "service: 2026-01-02\nvip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:1:10: service: 2026-01-02 is a date, not text: write \"2026-01-02\" in quotes if you mean the text"},
		{"null value", withWeight("~"), "svc.yaml:5:34: service \"web\": weight has no value: give it one, or leave the key out"},
		{"key without value", svcGood + "health:\n  # checks: [{type: tcp}]\n", "svc.yaml:5:8: service \"web\": health has no value: give it one, or leave the key out"},
		{"empty text", svcGood + "protocol: \"\"\n", "svc.yaml:5:11: service \"web\": protocol is empty: give it a value, or leave the key out"},
		{"boolean", svcGood + "failover: {drain_on_failover: yes}\n", "svc.yaml:5:31: service \"web\": drain_on_failover: want true or false, not \"yes\""},
		// Shapes.
		{"list for a mapping", svcHead + "backends: {address: 10.0.0.11}\n", "svc.yaml:4:11: service \"web\": backends: want a list ([a, b], or one \"- item\" line each), not a mapping"},
		{"scalar for a list", "service: web\nvip: 10.0.0.50\nports: 80\n" + svcOne, "svc.yaml:3:8: service \"web\": ports: want a list ([a, b], or one \"- item\" line each), not 80"},
		{"list document", "- a\n- b\n", "svc.yaml:1:1: want a mapping (key: value lines, or {key: value}), not a list"},
		// No anchors, aliases, merge keys or tags.
		{"anchor", "service: web\nvip: &v 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:2:6: service \"web\": vip: an anchor (&v) is not allowed: lvsd's files take no anchors or aliases"},
		{"alias", svcGood + "---\nservice: web2\nvip: 10.0.0.51\nports: [80]\nnat: &b {}\nbackends: *b\n",
			"svc.yaml:9:6: service \"web2\": nat: an anchor (&b) is not allowed: lvsd's files take no anchors or aliases\n" +
				"svc.yaml:10:11: service \"web2\": backends: an alias (*b) is not allowed: write the value out"},
		{"alias before its anchor", svcGood + "---\nservice: web2\nbackends: *b\n", "svc.yaml:7:11: an alias (*b) is not allowed: write the value out"},
		{"merge key", svcGood + "<<: {protocol: udp}\n", "svc.yaml:5:1: service \"web\": a merge key (<<) is not allowed: write the keys out"},
		{"tag", svcGood + "protocol: !!str tcp\n", "svc.yaml:5:11: service \"web\": protocol: a tag (!!str) is not allowed: quote a value to make it text"},
		// Text YAML does not allow.
		{"invalid UTF-8", "service: w\xffb\n", "svc.yaml:1:11: byte 0xff is not UTF-8 (lvsd reads YAML files as UTF-8)"},
		{"control character", "# ok\nservice: w\x07b\n", "svc.yaml:2:11: character U+0007 is not allowed in YAML (only printable characters, tab and line breaks)"},
		{"byte-order mark inside", svcGood + "\uFEFF# x\n", "svc.yaml:5:1: a byte-order mark (U+FEFF) is only allowed at the start of the file"},
		// Settings another setting would make lvsd ignore.
		{"affinity without mh", svcGood + "scheduler: rr\naffinity: client-ip\n", "svc.yaml:6:11: service \"web\": affinity client-ip needs scheduler mh (scheduler is rr, which ignores it); for stickiness with rr use persistence"},
		{"check key of another type", svcGood + "health: {checks: [{type: tcp, path: /x}]}\n", "svc.yaml:5:37: service \"web\": path is for http, https checks, not tcp (it would be ignored)"},
		{"icmp port", svcGood + "health: {checks: [{type: icmp, port: 80}]}\n", "svc.yaml:5:38: service \"web\": port is for tcp, http, https, udp, dns, exec checks, not icmp (it would be ignored)"},
		{"tls on http", svcGood + "health: {checks: [{type: http, tls: {verify: true}}]}\n", "svc.yaml:5:38: service \"web\": tls is for https checks, not http (it would be ignored)"},
		{"verify off with a CA", svcGood + "health: {checks: [{type: https, tls: {verify: false, server_name: a.example}}]}\n", "svc.yaml:5:47: service \"web\": verify: false would ignore ca_file and server_name; leave them out, or verify"},
		{"check port on several ports", "service: web\nvip: 10.0.0.50\nports: [80, 443]\nhealth: {checks: [{type: http}]}\n" + svcOne,
			"svc.yaml:5:13: service \"web\": a http check of backend 10.0.0.11 needs a port: the service has no single port (it takes 80, 443)"},
		{"check port on a range", "service: web\nvip: 10.0.0.50\nports: [\"8000-8009\"]\nhealth: {checks: [{type: tcp}]}\n" + svcOne,
			"svc.yaml:5:13: service \"web\": a tcp check of backend 10.0.0.11 needs a port: the service has no single port (it takes 8000-8009)"},
		// Values in messages are cut.
		{"long value", "service: web\nvip: " + strings.Repeat("1", 5000) + "\nports: [80]\n" + svcOne,
			"svc.yaml:2:6: service \"web\": vip \"" + strings.Repeat("1", 64) + "…\" is not an IP address"},
		// Syntax: the position of the offending token, and what is valid.
		{"unclosed list", "service: web\nvip: 10.0.0.50\nports: [80\n" + svcOne, "svc.yaml:4:1: YAML syntax: a list written [a, b] needs a ',' between items and a ']' at its end"},
		{"tab", "service: web\n\tvip: 10.0.0.50\n", "svc.yaml:2:1: YAML syntax: a tab or another character that cannot start a value here; YAML indents with spaces only"},
		{"missing colon", "service: web\nvip 10.0.0.50\nports: [80]\n", "svc.yaml:2:1: YAML syntax: want \"key: value\" here (a missing ':' after the key, or a line indented differently from its neighbours)"},
		{"syntax in a big document", "service: web\nvip: 10.0.0.50\nports: [80\n" + strings.Repeat("# padding\n", 2000), "svc.yaml:3:8: YAML syntax: a list written [a, b] needs a ']' at its end"},
		{"unclosed mapping", svcHead + "backends:\n  - {address: 10.0.0.11\n", "svc.yaml:5:5: YAML syntax: a mapping written {a: 1, b: 2} needs a '}' at its end"},
		{"wrong closing bracket", svcHead + "backends: [{address: 10.0.0.11, weight: 2]\n", "svc.yaml:4:42: YAML syntax: a mapping written {a: 1, b: 2} needs a ',' between entries and a '}' at its end"},
		{"stray bracket", "service: web\nvip: 10.0.0.50\nports: [80, 443]]\n" + svcOne, "svc.yaml:3:17: YAML syntax: a ']' that closes nothing"},
		{"empty item", svcGood + "health: {checks: [{type: tcp,, port: 80}]}\n", "svc.yaml:5:30: YAML syntax: an empty item: a ',' with nothing before it"},
		{"unclosed quote on the first line", "service: \"web\nvip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:1:10: YAML syntax: a text opened with \" is not closed"},
		{"unknown escape", "service: \"we\\qb\"\nvip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:1:13: YAML syntax: an unknown escape after \\ in a text in double quotes: write \\\\ for a backslash, or use single quotes"},
		{"reserved character", "service: @web\nvip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:1:10: YAML syntax: '@' cannot start a value: put the value in quotes"},
		{"colon in a value", "service: web\nvip: 10.0.0.50: 80\nports: [80]\n" + svcOne, "svc.yaml:2:15: YAML syntax: a ':' where none can go: quote a value that contains \": \", or check the indentation"},
		{"key indented under a value", "service: web\n vip: 10.0.0.50\nports: [80]\n" + svcOne, "svc.yaml:2:5: YAML syntax: a ':' where none can go: quote a value that contains \": \", or check the indentation"},
		{"key among list items", svcHead + "backends:\n  - address: 10.0.0.11\n  weight: 2\n", "svc.yaml:6:3: YAML syntax: " + misplaced},
		{"key between levels", svcHead + "backends:\n  - address: 10.0.0.11\n   weight: 2\n", "svc.yaml:6:4: YAML syntax: " + misplaced},
		{"key under a value", "service: web\nvip: 10.0.0.50 # c\n  ports: [80]\n" + svcOne, "svc.yaml:3:3: YAML syntax: " + misplaced},
		{"line under a block text", svcGood + "health:\n  checks:\n    - type: exec\n      command: |\n        true\n     timeout: 1s\n", "svc.yaml:10:6: YAML syntax: " + misplaced},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := serviceErrors(t, c.body); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.ReplaceAll(got, "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}
}

// Inputs that are valid YAML with a meaning lvsd keeps: they load.
func TestServiceFileAccepts(t *testing.T) {
	for name, body := range map[string]string{
		"byte-order mark":         "\uFEFF" + svcGood,
		"comment-only documents":  "# header\n---\n# disabled\n---\n" + svcGood + "---\n",
		"document end marker":     svcGood + "...\n",
		"quoted ports and ranges": "service: web\nvip: 10.0.0.50\nports: [\"80\", 443, \"8000-8009\"]\nhealth: {checks: [{type: tcp, port: 80}]}\n" + svcOne,
		"names quoted":            "service: \"1.0\"\nvip: 10.0.0.50\nports: [80]\n" + svcOne,
		"booleans in any case":    svcGood + "failover: {drain_on_failover: False}\n",
		"literal block text":      svcGood + "health: {checks: [{type: http, port: 80, body: ok}]}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got := serviceErrors(t, body); got != "" {
				t.Errorf("rejected:\n%s", got)
			}
		})
	}
}

// Issue 14: the agent file's classes, with exact message and position.
func TestAgentFileRejects(t *testing.T) {
	const head = "interface: eth0\nservices_dir: services.d\n"
	for _, c := range []struct{ name, body, want string }{
		{"second document", head + "---\nnode: b\n", "lvsd.yaml:4:1: a second YAML document (the first starts at line 1): an agent file holds exactly one"},
		{"second document after an empty one", "---\n---\n" + head + "---\n# nothing\n---\nnode: b\n", "lvsd.yaml:8:1: a second YAML document (the first starts at line 3): an agent file holds exactly one"},
		{"no settings", "# nothing yet\n", "lvsd.yaml: holds no settings: an agent file is one YAML mapping (at least interface: for a director)"},
		{"interface name", "interface: eth0/1\nservices_dir: services.d\n", "lvsd.yaml:1:12: \"eth0/1\" is not an interface name (1-15 characters, no spaces, slashes or colons)"},
		{"interface too long", "interface: abcdefghijklmnop\n", "lvsd.yaml:1:12: \"abcdefghijklmnop\" is not an interface name (1-15 characters, no spaces, slashes or colons)"},
		{"services_dir on a real server", "role: realserver\nservices_dir: services.d\nmetrics: {listen: off}\n",
			"lvsd.yaml:2:15: services_dir is for role director; a real server does not read it"},
		{"sync port wraps", head + "cluster:\n  insecure: true\n  conn_sync: {port: 65534}\n", "lvsd.yaml:5:21: port 65534 is not in 1-65533 (connection sync also uses the next two ports)"},
		{"nice range", head + "cluster:\n  insecure: true\n  nice: 99999999999999999999\n", "lvsd.yaml:5:9: nice 99999999999999999999 is not in -20-19"},
		{"numeric node name", "node: 0x1F\n" + head, "lvsd.yaml:1:7: node: 0x1F is a number, not text: write \"0x1F\" in quotes if you mean the text"},
		{"empty node name", "node: \"\"\n" + head, "lvsd.yaml:1:7: node is empty: give it a value, or leave the key out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agentErrors(t, c.body); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.ReplaceAll(got, "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}
}

// A file of many problems costs no more than one of MaxProblems: the load
// stops there and says so.
func TestProblemsCapped(t *testing.T) {
	const maxShown = 50 // problems List.Error spells out
	got := serviceErrors(t, svcGood+strings.Repeat("x: 1\n", 10_000))
	lines := strings.Split(got, "\n")
	if len(lines) != maxShown+1 || lines[maxShown] != "... and 151 more problems" {
		t.Errorf("%d lines, ending %q", len(lines), lines[len(lines)-1])
	}
	var l List
	_, err := loadServiceFiles(writeFile(t, t.TempDir(), "svc.yaml", svcGood+strings.Repeat("x: 1\n", 10_000)))
	if !asList(err, &l) || len(l) != yamldoc.MaxProblems+1 || !strings.HasSuffix(l[yamldoc.MaxProblems].Error(), "svc.yaml: checking stopped after 200 problems") {
		t.Errorf("%d problems, the last %v", len(l), l[len(l)-1])
	}
}
