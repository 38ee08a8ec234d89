package yamldoc

import (
	"strings"
	"testing"
)

// problems reads body as the file svc.yaml, decoding each document into a
// fresh rawTest when decode is set, and returns the problems' text.
func problems(body string, decode bool) string {
	var errs List
	Each("svc.yaml", []byte(body), &errs, func(d *Doc) {
		if decode {
			d.Decode(&rawTest{})
		}
	})
	if err := errs.Err(); err != nil {
		return err.Error()
	}
	return ""
}

const (
	head = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	one  = "backends: [{address: 10.0.0.11}]\n"
	good = head + one
)

// A document that does not parse, or text YAML does not allow, is
// reported at the offending character, in words that say what is valid.
func TestSyntax(t *testing.T) {
	const misplacedWords = "a value where none can go: keys of one mapping start in the same column, and items of a list each start with '- '"
	for _, c := range []struct{ name, body, want string }{
		{"unclosed list", "service: web\nvip: 10.0.0.50\nports: [80\n" + one, "svc.yaml:4:1: YAML syntax: a list written [a, b] needs a ',' between items and a ']' at its end"},
		{"tab", "service: web\n\tvip: 10.0.0.50\n", "svc.yaml:2:1: YAML syntax: a tab or another character that cannot start a value here; YAML indents with spaces only"},
		{"missing colon", "service: web\nvip 10.0.0.50\nports: [80]\n", "svc.yaml:2:1: YAML syntax: want \"key: value\" here (a missing ':' after the key, or a line indented differently from its neighbours)"},
		{"syntax in a big document", "service: web\nvip: 10.0.0.50\nports: [80\n" + strings.Repeat("# padding\n", 2000), "svc.yaml:3:8: YAML syntax: a list written [a, b] needs a ']' at its end"},
		{"unclosed mapping", head + "backends:\n  - {address: 10.0.0.11\n", "svc.yaml:5:5: YAML syntax: a mapping written {a: 1, b: 2} needs a '}' at its end"},
		{"wrong closing bracket", head + "backends: [{address: 10.0.0.11, weight: 2]\n", "svc.yaml:4:42: YAML syntax: a mapping written {a: 1, b: 2} needs a ',' between entries and a '}' at its end"},
		{"stray bracket", "service: web\nvip: 10.0.0.50\nports: [80, 443]]\n" + one, "svc.yaml:3:17: YAML syntax: a ']' that closes nothing"},
		{"empty item", good + "health: {checks: [{type: tcp,, port: 80}]}\n", "svc.yaml:5:30: YAML syntax: an empty item: a ',' with nothing before it"},
		{"unclosed quote on the first line", "service: \"web\nvip: 10.0.0.50\nports: [80]\n" + one, "svc.yaml:1:10: YAML syntax: a text opened with \" is not closed"},
		{"unknown escape", "service: \"we\\qb\"\nvip: 10.0.0.50\nports: [80]\n" + one, "svc.yaml:1:13: YAML syntax: an unknown escape after \\ in a text in double quotes: write \\\\ for a backslash, or use single quotes"},
		{"reserved character", "service: @web\nvip: 10.0.0.50\nports: [80]\n" + one, "svc.yaml:1:10: YAML syntax: '@' cannot start a value: put the value in quotes"},
		{"colon in a value", "service: web\nvip: 10.0.0.50: 80\nports: [80]\n" + one, "svc.yaml:2:15: YAML syntax: a ':' where none can go: quote a value that contains \": \", or check the indentation"},
		{"key indented under a value", "service: web\n vip: 10.0.0.50\nports: [80]\n" + one, "svc.yaml:2:5: YAML syntax: a ':' where none can go: quote a value that contains \": \", or check the indentation"},
		{"key among list items", head + "backends:\n  - address: 10.0.0.11\n  weight: 2\n", "svc.yaml:6:3: YAML syntax: " + misplacedWords},
		{"key between levels", head + "backends:\n  - address: 10.0.0.11\n   weight: 2\n", "svc.yaml:6:4: YAML syntax: " + misplacedWords},
		{"key under a value", "service: web\nvip: 10.0.0.50 # c\n  ports: [80]\n" + one, "svc.yaml:3:3: YAML syntax: " + misplacedWords},
		{"line under a block text", good + "health:\n  checks:\n    - type: exec\n      command: |\n        true\n     timeout: 1s\n", "svc.yaml:10:6: YAML syntax: " + misplacedWords},
		{"alias before its anchor", good + "---\nservice: web2\nbackends: *b\n", "svc.yaml:7:11: an alias (*b) is not allowed: write the value out"},
		{"second document only", good + "---\nservice: web\nvip: 10.0.0.50\nports: [80\n" + one, "svc.yaml:9:1: YAML syntax: a list written [a, b] needs a ',' between items and a ']' at its end"},
		// Text YAML does not allow.
		{"invalid UTF-8", "service: w\xffb\n", "svc.yaml:1:11: byte 0xff is not UTF-8 (lvsd reads YAML files as UTF-8)"},
		{"control character", "# ok\nservice: w\x07b\n", "svc.yaml:2:11: character U+0007 is not allowed in YAML (only printable characters, tab and line breaks)"},
		{"byte-order mark inside", good + "\uFEFF# x\n", "svc.yaml:5:1: a byte-order mark (U+FEFF) is only allowed at the start of the file"},
		// What parses is no problem of the parser's.
		{"byte-order mark at the start", "\uFEFF" + good, ""},
		{"comment-only documents", "# header\n---\n# disabled\n---\n" + good + "---\n", ""},
		{"document end marker", good + "...\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := problems(c.body, false); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.ReplaceAll(got, "\n", "\n  "), strings.ReplaceAll(c.want, "\n", "\n  "))
			}
		})
	}
}

// Each document is parsed and reported on its own, at its lines in the
// file; documents that hold nothing are skipped.
func TestEachDocument(t *testing.T) {
	var starts []int
	var errs List
	Each("f.yaml", []byte("# a\n---\n---\nservice: a\n---\n\nservice: b\n...\n---\nservice: c\n"), &errs, func(d *Doc) {
		starts = append(starts, d.StartLine())
	})
	if len(errs) > 0 || len(starts) != 3 || starts[0] != 4 || starts[1] != 7 || starts[2] != 10 {
		t.Errorf("documents at %v, problems %v", starts, errs)
	}
}
