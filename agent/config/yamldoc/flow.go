package yamldoc

import (
	"bytes"
	"strings"
)

const (
	flowUnclosed     = iota // the text ends inside the collection
	flowStray               // a closing bracket that closes nothing, or the other kind
	flowExtra               // something after the outermost collection closed
	flowEmpty               // an item that is not there: ",,", "[,"
	flowMissingComma        // an item right after another
)

// flowProblem is where a flow collection ([a, b] or {a: 1}) goes wrong.
type flowProblem struct {
	at     int  // offset of the token, or of the unclosed collection's opener
	kind   int  // flowUnclosed, flowStray, flowExtra, flowEmpty or flowMissingComma
	opener byte // '[' or '{': the collection at issue
	token  byte // the token's first byte
}

func (f flowProblem) say() string {
	what := "a list written [a, b] needs "
	sep, end := "items", "']'"
	if f.opener == '{' {
		what, sep, end = "a mapping written {a: 1, b: 2} needs ", "entries", "'}'"
	}
	switch f.kind {
	case flowUnclosed:
		return what + "a " + end + " at its end"
	case flowMissingComma:
		return what + "a ',' between " + sep + " and a " + end + " at its end"
	case flowEmpty:
		return "an empty item: a ',' with nothing before it"
	case flowStray:
		if f.opener == 0 {
			return "a '" + string(f.token) + "' that closes nothing"
		}
		return what + "a ',' between " + sep + " and a " + end + " at its end"
	}
	return "text after the end of a value written in brackets"
}

// scanFlow follows the flow collections that start on the line at text[from:]
// (its first value in brackets) and returns the first problem with them:
// an item not separated from the one before, a bracket of the wrong kind,
// a collection the text does not close, or text after the outermost
// closes. Its plain texts end at their line's end (YAML lets them go on,
// but such a text is hardly what a file that does not parse meant).
// Without a problem, the offset it is returned with is where it stopped.
func scanFlow(text []byte, from int) (flowProblem, bool) {
	eol := bytes.IndexByte(text[from:], '\n')
	if eol < 0 {
		eol = len(text) - from
	}
	l := text[from : from+eol]
	open := -1
	stray := -1
	eachPlain(l, func(i int) bool {
		switch c := l[i]; {
		case (c == '[' || c == '{') && valueStart(l, i):
			open = i
			return false
		case (c == ']' || c == '}') && stray < 0:
			stray = i
		}
		return true
	})
	if open < 0 {
		if stray >= 0 {
			return flowProblem{at: from + stray, kind: flowStray, token: l[stray]}, true
		}
		return flowProblem{}, false
	}
	type level struct {
		at     int
		opener byte
	}
	var stack []level
	const (
		wantItem  = iota // after an opener or ','
		haveItem         // after an item
		wantValue        // after a key's ':'
	)
	state := wantItem
	item := func(i int) (flowProblem, bool) {
		if state == haveItem {
			return flowProblem{at: i, kind: flowMissingComma, opener: stack[len(stack)-1].opener, token: text[i]}, true
		}
		state = haveItem
		return flowProblem{}, false
	}
	for i := from + open; i < len(text); i++ {
		c := text[i]
		if len(stack) == 0 && i > from+open {
			// The outermost collection closed: the rest of the line is
			// blanks and a comment.
			switch c {
			case ' ', '\t', '\r':
				continue
			case '\n', '#':
				return flowProblem{at: i}, false
			case ']', '}':
				return flowProblem{at: i, kind: flowStray, token: c}, true
			}
			return flowProblem{at: i, kind: flowExtra, token: c}, true
		}
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		case c == '#' && (text[i-1] == ' ' || text[i-1] == '\t' || text[i-1] == '\n'):
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '[' || c == '{':
			if p, ok := item(i); ok {
				return p, true
			}
			stack = append(stack, level{i, c})
			state = wantItem
		case c == ']' || c == '}':
			top := stack[len(stack)-1]
			if (c == ']') != (top.opener == '[') {
				return flowProblem{at: i, kind: flowStray, opener: top.opener, token: c}, true
			}
			stack = stack[:len(stack)-1]
			state = haveItem
		case c == ',':
			if state == wantItem {
				return flowProblem{at: i, kind: flowEmpty, opener: stack[len(stack)-1].opener, token: c}, true
			}
			state = wantItem
		case c == ':' && state == haveItem && (i+1 == len(text) || strings.IndexByte(" \t\r\n,[]{}", text[i+1]) >= 0):
			state = wantValue
		case c == '"' || c == '\'':
			if p, ok := item(i); ok {
				return p, true
			}
			end := quoteEnd(text[i:], 0)
			if end < 0 {
				return flowProblem{at: i, kind: flowUnclosed, opener: stack[len(stack)-1].opener, token: c}, true
			}
			i += end
		default:
			if p, ok := item(i); ok {
				return p, true
			}
			for i+1 < len(text) && !plainEnds(text, i+1) {
				i++
			}
		}
	}
	if len(stack) == 0 {
		return flowProblem{at: len(text)}, false
	}
	top := stack[len(stack)-1]
	return flowProblem{at: top.at, kind: flowUnclosed, opener: top.opener}, true
}

// plainEnds reports whether a plain text in brackets ends before text[i].
func plainEnds(text []byte, i int) bool {
	switch c := text[i]; c {
	case '\n', '\r', ',', '[', ']', '{', '}':
		return true
	case ':':
		return i+1 == len(text) || strings.IndexByte(" \t\r\n,[]{}", text[i+1]) >= 0
	case '#':
		return text[i-1] == ' ' || text[i-1] == '\t'
	}
	return false
}

// carry returns how many brackets and which quote are open at the end of
// l, given those open at its start.
func carry(l []byte, depth int, quote byte) (int, byte) {
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			switch {
			case quote == '"' && c == '\\':
				i++
			case quote == '\'' && c == '\'' && i+1 < len(l) && l[i+1] == '\'':
				i++
			case c == quote:
				quote = 0
			}
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return depth, 0
		case (c == '"' || c == '\'') && (depth > 0 || valueStart(l, i)):
			quote = c
		case (c == '[' || c == '{') && (depth > 0 || valueStart(l, i)):
			depth++
		case (c == ']' || c == '}') && depth > 0:
			depth--
		}
	}
	return depth, quote
}

// firstFlowProblem is the first problem, before offset limit, of the
// values in brackets that start on the lines from line mark (from 1) on,
// unless one is not closed. Each line is looked at once: the lines inside
// brackets opened on a line before are scanned from that line.
func firstFlowProblem(text []byte, lines [][]byte, mark, limit int) (flowProblem, bool) {
	off := lineOffset(lines, mark)
	scanned := 0 // the lines up to here are looked at
	for _, l := range lines[mark-1:] {
		if off >= limit {
			break
		}
		if off >= scanned && bytes.ContainsAny(l, "[]{}") {
			f, ok := scanFlow(text, off)
			switch {
			case ok && f.kind == flowUnclosed:
				return flowProblem{}, false // the rest is inside it
			case ok:
				return f, f.at < limit
			}
			scanned = f.at
		}
		off += len(l)
	}
	return flowProblem{}, false
}
