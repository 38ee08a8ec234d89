package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The YAML of a file is parsed in two steps, each bounded in work:
//
//  1. The text is checked (UTF-8, no characters YAML forbids) and cut into
//     documents at their "---" lines, so that every document is parsed,
//     checked and reported on its own, whatever comes before it.
//  2. Each document is parsed into a node tree by go.yaml.in/yaml/v3, whose
//     parser works in linear time and memory and never expands aliases
//     into a node tree. The tree is then decoded strictly (decode.go).
//
// A document that does not parse is reported at the offending token
// (syntax.go).

const bom = "\uFEFF"

// MaxProblems bounds the problems collected in one load: past it, the rest
// of a file is not checked, so a broken generator's output costs no more
// than it takes to say it is broken.
const MaxProblems = 200

// Each parses data, the content of file, into its documents and calls f
// with each, skipping empty ones (nothing but comments); every problem,
// the Docs' own included, goes to errs. It stops once errs holds
// MaxProblems.
func Each(file string, data []byte, errs *List, f func(*Doc)) {
	data = bytes.TrimPrefix(data, []byte(bom))
	if e := checkText(file, data); e != nil {
		*errs = append(*errs, e)
		return
	}
	for _, c := range splitDocuments(data) {
		if len(*errs) >= MaxProblems {
			*errs = append(*errs, &Error{File: file, Line: c.line + 1, Col: 1, Msg: fmt.Sprintf("not checked from here on: more than %d problems already", MaxProblems)})
			return
		}
		if blank(c.text) {
			continue
		}
		for _, d := range parseChunk(file, c, errs) {
			f(d)
			if len(*errs) >= MaxProblems {
				*errs = append(*errs, &Error{File: file, Msg: fmt.Sprintf("checking stopped after %d problems", MaxProblems)})
				return
			}
		}
	}
}

// blank reports whether a document holds nothing but its "---", blank
// lines and comments, to skip it without a parser.
func blank(text []byte) bool {
	for i, l := range bytes.Split(text, []byte("\n")) {
		if i == 0 && isDocumentStart(l) {
			l = l[3:]
		}
		l = bytes.TrimLeft(l, " \t\r")
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// chunk is the text from one "---" line (or the file's start) to the next.
type chunk struct {
	text []byte
	line int // lines of the file before the chunk
}

// splitDocuments cuts data before every line that starts a document:
// "---" alone or followed by a space or tab. YAML forbids that line inside
// a document, in any scalar, so the cut never splits a value.
func splitDocuments(data []byte) []chunk {
	var out []chunk
	start, startLine, line := 0, 0, 0
	for i := 0; i < len(data); {
		next := bytes.IndexByte(data[i:], '\n')
		end := len(data)
		if next >= 0 {
			end = i + next + 1
		}
		if i > start && isDocumentStart(data[i:end]) {
			out = append(out, chunk{text: data[start:i], line: startLine})
			start, startLine = i, line
		}
		i = end
		line++
	}
	return append(out, chunk{text: data[start:], line: startLine})
}

func isDocumentStart(l []byte) bool {
	if !bytes.HasPrefix(l, []byte("---")) {
		return false
	}
	return len(l) == 3 || strings.IndexByte(" \t\r\n", l[3]) >= 0
}

// parseChunk parses the documents of one chunk (one, unless "..." ends a
// document and another follows without "---").
func parseChunk(file string, c chunk, errs *List) []*Doc {
	dec := yaml.NewDecoder(bytes.NewReader(c.text))
	var docs []*Doc
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			*errs = append(*errs, syntaxError(file, c, err))
			return docs
		}
		if len(n.Content) == 0 || isEmpty(n.Content[0]) {
			continue
		}
		docs = append(docs, &Doc{File: file, root: n.Content[0], line: c.line, errs: errs})
	}
}

// isEmpty reports whether a document's content is nothing at all: no value,
// only comments (an explicit null, "~", is a value, and an error later).
func isEmpty(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" && n.Style == 0
}

// syntaxError describes a document that does not parse, at the token
// yaml/v3 objects to, in words that say what would be valid.
func syntaxError(file string, c chunk, err error) *Error {
	msg, line := v3Message(err)
	// An alias of an anchor defined later (or never) does not parse; it
	// is refused like any other alias, at its place.
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		if line, col, ok := find(c.text, "*"+m[1]); ok {
			return &Error{File: file, Line: c.line + line, Col: col,
				Msg: fmt.Sprintf("an alias (*%s) is not allowed: write the value out", visible(Cut(m[1])))}
		}
	}
	mark := markLine(c.text)
	if mark == 0 { // not the same failure again: the line yaml/v3 gave
		mark = max(line, 1)
	}
	line, col, say := locateSyntax(c.text, mark, msg)
	return &Error{File: file, Line: c.line + line, Col: col, Msg: "YAML syntax: " + parserWords(say)}
}

var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// find is the line and column (in characters) of the first s in text.
func find(text []byte, s string) (int, int, bool) {
	i := bytes.Index(text, []byte(s))
	if i < 0 {
		return 0, 0, false
	}
	line, col := position(text, i)
	return line, col, true
}

// parserWords keeps a parser's message to one line of bounded length: it
// may quote any amount of the file.
func parserWords(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if r := []rune(msg); len(r) > 3*maxShownValue {
		msg = string(r[:3*maxShownValue]) + "…"
	}
	return visible(msg)
}

// checkText rejects what YAML does not allow in a file: text that is not
// UTF-8, and characters outside YAML's printable set (C0 and C1 controls
// but tab, line feed and carriage return; surrogates; U+FFFE and U+FFFF;
// a byte-order mark anywhere but at the start).
func checkText(file string, data []byte) *Error {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return &Error{File: file, Line: line, Col: col,
				Msg: fmt.Sprintf("byte 0x%02x is not UTF-8 (lvsd reads YAML files as UTF-8)", data[i])}
		case r == '\n':
			line, col = line+1, 0
		case r == 0xfeff:
			return &Error{File: file, Line: line, Col: col,
				Msg: "a byte-order mark (U+FEFF) is only allowed at the start of the file"}
		case !yamlPrintable(r):
			return &Error{File: file, Line: line, Col: col,
				Msg: fmt.Sprintf("character %U is not allowed in YAML (only printable characters, tab and line breaks)", r)}
		}
		i += size
		col++
	}
	return nil
}

func yamlPrintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return true
	case r < 0x20 || r == 0x7f:
		return false
	case r < 0x7f:
		return true
	case r == 0x85:
		return true
	case r < 0xa0:
		return false
	case r == 0xfeff || r == 0xfffe || r == 0xffff:
		return false
	}
	return !(r >= 0xd800 && r <= 0xdfff)
}
