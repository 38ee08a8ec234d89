package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ErrNoConfig is wrapped when the agent file itself does not exist, which is a
// different problem from a file that exists and is wrong.
var ErrNoConfig = errors.New("no configuration file")

// Error is one problem in one file, at a line and column (0 when unknown).
type Error struct {
	File      string
	Line, Col int
	Msg       string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return e.Msg
}

// List collects every problem found, so one run of `lvsd check` shows them all.
type List []*Error

// maxShown bounds how many problems List.Error spells out: a broken
// generator can produce a million, and the first ones say what is wrong.
const maxShown = 50

func (l List) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i == maxShown {
			fmt.Fprintf(&b, "\n... and %d more problems", len(l)-maxShown)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find each *Error.
func (l List) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

func (l List) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// doc is one parsed YAML document and the file it came from, able to say
// where a value is.
type doc struct {
	file string
	root *yaml.Node // the document's content
	line int        // lines of the file before the document's text
	errs *List
	// prefix starts every decoding message, e.g. `service "web": `.
	prefix string
	// undecoded are the nodes the decoder refused. Validation still runs,
	// so that one `lvsd check` shows every problem, but it stays silent
	// about these nodes and about what is missing (their fields are left
	// empty): that would only repeat the decoder's message.
	undecoded map[*yaml.Node]bool
	// laxModes (strict_modes: false): the programs the document names are
	// run whoever may write them (program.Check).
	laxModes bool
}

// errorf records a problem at the node found by path (a path such as
// "$.backends[1].weight"); when the path is absent it points at the
// nearest parent that is there, at last at the document.
func (d *doc) errorf(path string, format string, args ...any) {
	n, found := lookup(d.root, path)
	if d.full() || len(d.undecoded) > 0 && (!found || n == d.root || d.undecoded[n]) {
		return
	}
	line, col := d.at0(n)
	*d.errs = append(*d.errs, &Error{File: d.file, Line: line, Col: col, Msg: fmt.Sprintf(format, shorten(args)...)})
}

// position is where path is, or its nearest parent that is there.
func (d *doc) position(path string) (int, int) {
	n, _ := lookup(d.root, path)
	return d.at0(n)
}

// at0 is where n is shown: a mapping at its first key, where a reader's
// eye goes.
func (d *doc) at0(n *yaml.Node) (int, int) {
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

// cut shortens s to maxShownValue characters, marking the cut.
func cut(s string) string {
	if utf8.RuneCountInString(s) <= maxShownValue {
		return s
	}
	r := []rune(s)
	return string(r[:maxShownValue]) + "…"
}

// verbatim is message text that shorten leaves whole (a list of keys).
type verbatim string

func (v verbatim) String() string { return string(v) }

// shorten cuts every string among a message's arguments.
func shorten(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
		if _, ok := a.(verbatim); ok {
			continue
		}
		if v := reflect.ValueOf(a); v.Kind() == reflect.String && v.Len() > maxShownValue {
			out[i] = cut(v.String())
		}
	}
	return out
}
