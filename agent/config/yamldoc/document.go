package yamldoc

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Doc is one parsed YAML document and the file it came from, able to say
// where a value is. Its problems go to the List that Each was given.
type Doc struct {
	File string
	// Prefix starts every message of Decode, e.g. `service "web": `.
	Prefix string

	root *yaml.Node // the document's content
	line int        // lines of the file before the document's text
	errs *List
	// undecoded are the nodes the decoder refused. Validation still runs,
	// so that one `lvsd check` shows every problem, but it stays silent
	// about these nodes and about what is missing (their fields are left
	// empty): that would only repeat the decoder's message.
	undecoded map[*yaml.Node]bool
}

// StartLine is the line of the file where the document's content starts.
func (d *Doc) StartLine() int { return d.line + d.root.Line }

// Errorf records a problem at the node found by path (a path such as
// "$.backends[1].weight"); when the path is absent it points at the
// nearest parent that is there, at last at the document. After Decode it
// says nothing about a node Decode refused, nor (when Decode refused
// anything) about what is absent: that would only repeat Decode's message.
func (d *Doc) Errorf(path string, format string, args ...any) {
	n, found := lookup(d.root, path)
	if d.full() || len(d.undecoded) > 0 && (!found || n == d.root || d.undecoded[n]) {
		return
	}
	line, col := d.at0(n)
	*d.errs = append(*d.errs, &Error{File: d.File, Line: line, Col: col, Msg: fmt.Sprintf(format, shorten(args)...)})
}

// TextAt is the value at path when it is YAML text (not a number or
// another kind of scalar), read before Decode and whatever Decode makes of
// it; "" otherwise. A caller names a document by it in the messages about
// its other keys.
func (d *Doc) TextAt(path string) string {
	if n, found := lookup(d.root, path); found && n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		return n.Value
	}
	return ""
}

// Position is the line and column of path, or of its nearest parent that
// is there.
func (d *Doc) Position(path string) (int, int) {
	n, _ := lookup(d.root, path)
	return d.at0(n)
}

// at0 is where n is shown: a mapping at its first key, where a reader's
// eye goes.
func (d *Doc) at0(n *yaml.Node) (int, int) {
	if n.Kind == yaml.MappingNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	return d.line + n.Line, n.Column
}

// lookup follows path from root as far as it goes; found reports whether
// it went all the way.
func lookup(root *yaml.Node, path string) (n *yaml.Node, found bool) {
	n = root
	for _, seg := range splitPath(strings.TrimPrefix(path, "$")) {
		next := child(n, seg)
		if next == nil {
			return n, false
		}
		n = next
	}
	return n, true
}

// splitPath turns ".backends[1].weight" into "backends", "[1]", "weight".
func splitPath(p string) []string {
	var out []string
	for p != "" {
		switch p[0] {
		case '.':
			p = p[1:]
		case '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return out
			}
			out, p = append(out, p[:end+1]), p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			out, p = append(out, p[:end]), p[end:]
		}
	}
	return out
}

func child(n *yaml.Node, seg string) *yaml.Node {
	if strings.HasPrefix(seg, "[") {
		i, err := strconv.Atoi(seg[1 : len(seg)-1])
		if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
			return nil
		}
		return n.Content[i]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == seg {
			return n.Content[i+1]
		}
	}
	return nil
}

// maxShownValue bounds, in characters, every text of a file quoted in a
// message: a problem is at most a line or two, whatever the file holds.
const maxShownValue = 64

// Cut shortens s to maxShownValue characters, marking the cut: for any
// text of a file that a message quotes.
func Cut(s string) string {
	if utf8.RuneCountInString(s) <= maxShownValue {
		return s
	}
	r := []rune(s)
	return string(r[:maxShownValue]) + "…"
}

// Verbatim is message text that Errorf leaves whole, however long (a list
// of keys), where it cuts every other string argument.
type Verbatim string

func (v Verbatim) String() string { return string(v) }

// shorten cuts every string among a message's arguments.
func shorten(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
		if _, ok := a.(Verbatim); ok {
			continue
		}
		if v := reflect.ValueOf(a); v.Kind() == reflect.String && v.Len() > maxShownValue {
			out[i] = Cut(v.String())
		}
	}
	return out
}
