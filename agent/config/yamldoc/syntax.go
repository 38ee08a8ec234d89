package yamldoc

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

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
