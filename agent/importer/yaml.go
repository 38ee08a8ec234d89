package importer

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Text quotes s for YAML where a plain scalar would be read as something
// else than the text (a number, a boolean, null) or would not parse;
// lvsd reads values as written, so "1.0" must stay quoted.
func Text(s string) string {
	if plainText.MatchString(s) && !looksTyped.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

var (
	plainText  = regexp.MustCompile(`^[A-Za-z0-9_./-]+$`)
	looksTyped = regexp.MustCompile(`(?i)^([-+]?(\.[0-9]|[0-9])[0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0x.*|0o.*|true|false|yes|no|on|off|null|y|n|~|[0-9]{4}-[0-9]{2}-[0-9]{2}.*)$|^[.-]`)
)

// List writes a flow list of the values, each already in YAML.
func List(values []string) string { return "[" + strings.Join(values, ", ") + "]" }

// Texts writes a flow list of texts.
func Texts(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = Text(v)
	}
	return List(q)
}

// Duration writes d as lvsd's durations are written ("6s", "1.5s",
// "500ms", "2m").
func Duration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "m0s")
	if s != d.String() {
		s += "m"
	}
	return strings.TrimSuffix(strings.Replace(s, "h0m", "h", 1), "h0s")
}

// Writer builds a YAML file line by line, with comments.
type Writer struct {
	b strings.Builder
}

// Comment writes each line of text as a comment at indent.
func (w *Writer) Comment(indent int, text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		w.b.WriteString(strings.Repeat(" ", indent))
		if l == "" {
			w.b.WriteString("#\n")
			continue
		}
		w.b.WriteString("# " + l + "\n")
	}
}

// Key writes `key: value` at indent, with an end-of-line comment when
// comment is not empty; value is already YAML ("" opens a block).
func (w *Writer) Key(indent int, key, value, comment string) {
	line := strings.Repeat(" ", indent) + key + ":"
	if value != "" {
		line += " " + value
	}
	if comment != "" {
		line = fmt.Sprintf("%-40s # %s", line, comment)
	}
	w.b.WriteString(line + "\n")
}

// Item writes a list item `- value` at indent, with a comment.
func (w *Writer) Item(indent int, value, comment string) {
	line := strings.Repeat(" ", indent) + "- " + value
	if comment != "" {
		line = fmt.Sprintf("%-40s # %s", line, comment)
	}
	w.b.WriteString(line + "\n")
}

// Raw writes s as it is.
func (w *Writer) Raw(s string) { w.b.WriteString(s) }

// String returns what was written.
func (w *Writer) String() string { return w.b.String() }

// ServiceName names the service of a VIP, port and protocol the way both
// importers do: "10.0.0.1-80", "10.0.0.1-53-udp", "2001-db8--1-443" (an
// IPv6 address's colons become dashes, so that the name is a file name
// everywhere); port 0: every port ("10.0.0.1-all"), or several.
func ServiceName(vip netip.Addr, port int, proto string) string {
	name := strings.ReplaceAll(vip.String(), ":", "-")
	if port > 0 {
		name += "-" + strconv.Itoa(port)
	} else {
		name += "-all"
	}
	if proto != "tcp" {
		name += "-" + proto
	}
	return name
}
