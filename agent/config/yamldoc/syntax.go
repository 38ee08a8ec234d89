package yamldoc

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// A syntax error is reported at the offending token, in words that say
// what would be valid. yaml/v3 finds the error and keeps a mark of it, but
// its message gives only the mark's line, and that line is the line before
// the mark for some errors and missing for others. So the document is
// parsed once more one line lower, where every mark has a line and the
// kind of error says which (markLine), and then the token is found in the
// text from that line on (locateSyntax). All of it is linear in the
// document.

var v3Line = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// v3Message cuts yaml/v3's "yaml: line N: " off an error, and returns N
// (0: none).
func v3Message(err error) (string, int) {
	msg := err.Error()
	m := v3Line.FindStringSubmatch(msg)
	if m == nil {
		return msg, 0
	}
	n, _ := strconv.Atoi(m[1])
	return msg[len(m[0]):], n
}

// scannerProblems are the problems yaml/v3's scanner reports (the others
// come from its parser): its message counts their mark's line from 1, the
// parser's from 0.
var scannerProblems = []string{
	"found character that cannot start any token", "could not find expected ':'",
	"not allowed in this context", "exceeded max depth", "while scanning",
	"directive", "version number", "did not find expected digit", "did not find expected whitespace",
	"did not find expected alphabetic or numeric character", "did not find the expected '>'",
	"did not find expected '!'", "did not find expected tag URI", "did not find URI escaped octet",
	"UTF-8 octet", "indentation indicator", "did not find expected comment or line break",
	"tab character", "found unexpected document indicator", "found unexpected end of stream",
	"escape", "hexdecimal number",
}

func isScannerProblem(msg string) bool {
	for _, p := range scannerProblems {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// markLine is the line (from 1) of the mark of the error that text, one
// chunk, fails to parse with; 0 if parsing it again does not fail so.
// Parsed after a blank line, no mark is on the first line, which yaml/v3
// would not name.
func markLine(text []byte) int {
	dec := yaml.NewDecoder(io.MultiReader(strings.NewReader("\n"), bytes.NewReader(text)))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return 0
		}
		msg, line := v3Message(err)
		if isScannerProblem(msg) {
			line-- // from 1, one line lower
		}
		return line
	}
}

// syntaxHints say what would be valid instead of what yaml/v3's parser
// missed. The others keep its words.
var syntaxHints = []struct{ contains, say string }{
	{"could not find expected ':'", "want \"key: value\" here (a missing ':' after the key, or a line indented differently from its neighbours)"},
	{"tab character", "a tab or another character that cannot start a value here; YAML indents with spaces only"},
	{"mapping values are not allowed", "a ':' where none can go: quote a value that contains \": \", or check the indentation"},
	{"block sequence entries are not allowed", "a list item ('- ') where none can go: check the indentation"},
	{"did not find expected key", misplaced},
	{"did not find expected '-' indicator", misplaced},
	{"incompatible YAML document", "a %YAML directive of a version other than 1.1 or 1.2"},
	{"unknown escape character", "an unknown escape after \\ in a text in double quotes: write \\\\ for a backslash, or use single quotes"},
}

const misplaced = "a value where none can go: keys of one mapping start in the same column, and items of a list each start with '- '"

// locateSyntax finds the token that yaml/v3's error with message msg and
// mark on line mark (from 1) is about, in text. It returns its line and
// column (from 1) and what to say; when the error is none it knows, the
// first token of the mark's line and yaml/v3's words.
func locateSyntax(text []byte, mark int, msg string) (line, col int, say string) {
	say = msg
	for _, h := range syntaxHints {
		if strings.Contains(msg, h.contains) {
			say = h.say
			break
		}
	}
	lines := bytes.SplitAfter(text, []byte("\n"))
	mark = min(max(mark, 1), len(lines)) // at the end of a text without a last line break, yaml/v3's mark is past it
	at := func(off int) (int, int) { return position(text, off) }
	start := lineOffset(lines, mark)
	l := lines[mark-1]
	first := start + len(l) - len(bytes.TrimLeft(l, " "))
	switch {
	case strings.Contains(msg, "expected ',' or ']'"), strings.Contains(msg, "expected ',' or '}'"), strings.Contains(msg, "node content"):
		if f, ok := scanFlow(text, start); ok {
			line, col = at(f.at)
			return line, col, f.say()
		}
	case strings.Contains(msg, "did not find expected key"), strings.Contains(msg, "did not find expected '-' indicator"):
		// The first line indented amiss, unless a bracket is amiss before.
		il, ic, indented := misindented(lines, mark)
		limit := len(text)
		if indented {
			limit = lineOffset(lines, il) + ic - 1
		}
		if f, ok := firstFlowProblem(text, lines, mark, limit); ok {
			line, col = at(f.at)
			return line, col, f.say()
		}
		if indented {
			return il, ic, say
		}
	case strings.Contains(msg, "comment or line break"), strings.Contains(msg, "indentation indicator"), strings.Contains(msg, "indentation space"):
		// The mark is a block text's "|" or ">" (or a directive's "%").
		if i := bytes.IndexAny(l, "|>"); i >= 0 {
			line, col = at(start + i)
			if strings.Contains(msg, "comment or line break") {
				say = "after a block text's | or > come only an indentation digit, + or -, and a comment; the text starts on the next line"
			}
			return line, col, say
		}
	case strings.Contains(msg, "tag") || strings.Contains(msg, "'!'") || strings.Contains(msg, "'>'"):
		if i := bytes.IndexByte(l, '!'); i >= 0 {
			line, col = at(start + i)
			return line, col, say
		}
	case strings.Contains(msg, "tab character that violates indentation"):
		// The mark is the plain text the tab came after.
		for i := start; i < len(text); i++ {
			if text[i] == '\t' && (i == 0 || text[i-1] == '\n' || text[i-1] == ' ' || text[i-1] == '\t') {
				line, col = at(i)
				return line, col, say
			}
		}
	case strings.Contains(msg, "cannot start any token"):
		if i := bytes.IndexAny(l[first-start:], "\t@`%"); i >= 0 {
			line, col = at(first + i)
			if c := text[first+i]; c != '\t' {
				say = "'" + string(c) + "' cannot start a value: put the value in quotes"
			}
			return line, col, say
		}
	case strings.Contains(msg, "mapping values are not allowed"):
		// The second ':' of "a: b: c", or the only one of a line that
		// continues the text of the one before.
		colons := valueColons(l)
		if len(colons) > 1 {
			colons = colons[1:]
		}
		if len(colons) > 0 {
			line, col = at(start + colons[0])
			return line, col, say
		}
	case strings.Contains(msg, "block sequence entries"):
		if i := bytes.Index(l, []byte("- ")); i >= 0 {
			line, col = at(start + i)
			return line, col, say
		}
	case strings.Contains(msg, "end of stream"), strings.Contains(msg, "document indicator"):
		// A quoted text that does not end: the quote that is still open at
		// the end of the line it starts on.
		if i, q := openQuote(l); i >= 0 {
			line, col = at(start + i)
			return line, col, "a text opened with " + string(q) + " is not closed"
		}
	case strings.Contains(msg, "escape"), strings.Contains(msg, "hexdecimal"):
		if i := badEscape(text[start:]); i >= 0 {
			line, col = at(start + i)
			return line, col, say
		}
	}
	// The mark is the start of a token: the first of its line, unless the
	// line starts with list items' "- ".
	i := first
	for i+1 < len(text) && text[i] == '-' && (text[i+1] == ' ') {
		i += 2
		for i < len(text) && text[i] == ' ' {
			i++
		}
	}
	line, col = at(i)
	return line, col, say
}

// lineOffset is the offset of line n (from 1) of lines.
func lineOffset(lines [][]byte, n int) int {
	off := 0
	for _, l := range lines[:n-1] {
		off += len(l)
	}
	return off
}

// position is the line and column (from 1, in characters) of text[off].
func position(text []byte, off int) (int, int) {
	before := text[:off]
	start := bytes.LastIndexByte(before, '\n') + 1
	return 1 + bytes.Count(before, []byte("\n")), 1 + utf8.RuneCount(before[start:])
}

// valueColons are the offsets in l of the ':'s that separate a key from
// its value (followed by a space or the line's end), outside quotes and
// comments.
func valueColons(l []byte) []int {
	var out []int
	eachPlain(l, func(i int) bool {
		if l[i] == ':' && (i+1 == len(l) || l[i+1] == ' ' || l[i+1] == '\n' || l[i+1] == '\r') {
			out = append(out, i)
		}
		return true
	})
	return out
}

// eachPlain calls f with the offset of every byte of l outside quoted
// text and comments, until f returns false. A quote opens a text only
// where a value starts (a quote inside plain text, as in it's, is text).
func eachPlain(l []byte, f func(int) bool) {
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return
		case (c == '"' || c == '\'') && valueStart(l, i):
			end := quoteEnd(l, i)
			if end < 0 {
				return
			}
			i = end
			continue
		}
		if !f(i) {
			return
		}
	}
}

// valueStart reports whether a value may start at l[i]: at the line's
// first character, or after blanks, "- ", ": ", or a flow collection's
// '[', '{' or ','.
func valueStart(l []byte, i int) bool {
	j := i - 1
	for j >= 0 && (l[j] == ' ' || l[j] == '\t') {
		j--
	}
	if j < 0 {
		return true
	}
	switch l[j] {
	case '[', '{', ',':
		return true
	case ':', '-', '?':
		return j < i-1 // followed by a blank
	}
	return false
}

// quoteEnd is the offset of the quote that closes the text opened at
// l[i], or -1 if it is not closed on l.
func quoteEnd(l []byte, i int) int {
	q := l[i]
	for j := i + 1; j < len(l); j++ {
		switch {
		case q == '"' && l[j] == '\\':
			j++
		case q == '\'' && l[j] == '\'' && j+1 < len(l) && l[j+1] == '\'':
			j++
		case l[j] == q:
			return j
		}
	}
	return -1
}

// openQuote is the offset and the quote of the text l opens and does not
// close; -1 if none.
func openQuote(l []byte) (int, byte) {
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return -1, 0
		case (c == '"' || c == '\'') && valueStart(l, i):
			end := quoteEnd(l, i)
			if end < 0 {
				return i, c
			}
			i = end
		}
	}
	return -1, 0
}

// badEscape is the offset in text of the first backslash in a text in
// double quotes that yaml/v3 takes for no escape; -1 if none.
func badEscape(text []byte) int {
	in := false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case !in && c == '"' && valueStart(text[:i+1], i):
			in = true
		case in && c == '"':
			in = false
		case in && c == '\\' && i+1 < len(text):
			i++
			switch n := text[i]; {
			case strings.IndexByte("0abt\tnvfre \"/\\N_LP\r\n", n) >= 0:
			case n == 'x' || n == 'u' || n == 'U':
				width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[n]
				if i+width >= len(text) || !isHex(text[i+1:i+1+width]) {
					return i - 1
				}
				i += width
			default:
				return i - 1
			}
		}
	}
	return -1
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// flowProblem is where a flow collection ([a, b] or {a: 1}) goes wrong.
type flowProblem struct {
	at     int  // offset of the token, or of the unclosed collection's opener
	kind   int  // flowUnclosed, flowStray, flowExtra, flowEmpty or flowMissingComma
	opener byte // '[' or '{': the collection at issue
	token  byte // the token's first byte
}

const (
	flowUnclosed     = iota // the text ends inside the collection
	flowStray               // a closing bracket that closes nothing, or the other kind
	flowExtra               // something after the outermost collection closed
	flowEmpty               // an item that is not there: ",,", "[,"
	flowMissingComma        // an item right after another
)

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

// misindented finds, from line mark (from 1) on, the first line of lines
// whose indentation fits no mapping or list around it: deeper than the
// line before with nothing there to hold it, between two levels, or a key
// among a list's items. Lines inside brackets, quotes or a block text
// ("|", ">") are not looked at.
func misindented(lines [][]byte, mark int) (int, int, bool) {
	type level struct {
		col  int
		list bool // its first entry is a "- " item
	}
	var levels []level
	opens := true // the line before leaves a value to be given below it
	block := -1   // in a block text: the indentation it is deeper than
	text := -1    // and its own, once its first line says it
	depth := 0    // brackets open from the lines before
	var quote byte
	for n, raw := range lines {
		l := bytes.TrimRight(raw, " \t\r\n")
		col := len(l) - len(bytes.TrimLeft(l, " "))
		body := l[col:]
		switch {
		case depth > 0 || quote != 0:
			depth, quote = carry(l, depth, quote)
			continue
		case len(body) == 0:
			continue
		case block >= 0 && text < 0 && col > block:
			text = col
			continue
		case block >= 0 && col >= text:
			continue
		case body[0] == '#':
			continue
		}
		bad := block >= 0 && col > block // under a block text, less indented than its lines
		block, text = -1, -1
		list := body[0] == '-' && (len(body) == 1 || body[1] == ' ')
		key := len(valueColons(body)) > 0
		switch {
		case bad:
		case len(levels) == 0 || col > levels[len(levels)-1].col:
			if len(levels) > 0 && !opens && (key || list) {
				bad = true
			} else if key || list || opens {
				levels = append(levels, level{col, list})
			}
		default:
			for len(levels) > 0 && levels[len(levels)-1].col > col {
				levels = levels[:len(levels)-1]
			}
			bad = len(levels) == 0 || levels[len(levels)-1].col != col || levels[len(levels)-1].list && !list
		}
		if bad && n+1 >= mark {
			return n + 1, col + 1, true
		}
		// "- key: value" holds a mapping whose keys line up after "- ".
		inner := col
		for len(body) > 1 && body[0] == '-' && body[1] == ' ' {
			trimmed := bytes.TrimLeft(body[1:], " ")
			inner += len(body) - len(trimmed)
			body = trimmed
			if len(body) > 0 && len(valueColons(body)) > 0 {
				levels = append(levels, level{inner, false})
			}
		}
		value := lastValue(body)
		opens = len(value) == 0 || value[0] == '|' || value[0] == '>'
		if len(value) > 0 && (value[0] == '|' || value[0] == '>') {
			block = col
		}
		depth, quote = carry(l, 0, 0)
	}
	return 0, 0, false
}

// lastValue is what follows a line's last key (its last ':' before a
// blank), or the line after its "- " items, comments and blanks cut.
func lastValue(body []byte) []byte {
	end := len(body)
	eachPlain(body, func(i int) bool {
		end = i + 1
		return true
	})
	body = bytes.TrimRight(body[:end], " \t")
	if c := valueColons(body); len(c) > 0 {
		return bytes.TrimLeft(body[c[len(c)-1]+1:], " ")
	}
	for len(body) > 0 && body[0] == '-' && (len(body) == 1 || body[1] == ' ') {
		body = bytes.TrimLeft(body[1:], " ")
	}
	return body
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
