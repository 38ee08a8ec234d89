package yamldoc

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

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
