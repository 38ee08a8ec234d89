// Package keepalived reads keepalived.conf (its `virtual_server`,
// `virtual_server_group`, `vrrp_instance` and `global_defs` blocks) and
// converts it into lvsd's agent and service files, with a report of what
// each keyword became (convert.go). It reads files only through an fs.FS,
// so the conversion is pure and testable without a host.
package keepalived

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Node is one statement of keepalived.conf: a keyword, its arguments and,
// for a block (`name args { ... }`), the statements inside.
type Node struct {
	Keyword  string
	Args     []string
	File     string
	Line     int
	Children []*Node
	Block    bool // written with braces, even if empty
}

// Where is the node's position as "file:line".
func (n *Node) Where() string { return fmt.Sprintf("%s:%d", n.File, n.Line) }

// Bounds of what a configuration may make the parser do: files of up to
// 1 MiB, 256 files through includes, 8 levels of includes, 64 levels of
// blocks, 1,000,000 statements in all.
const (
	MaxFileSize     = 1 << 20
	MaxFiles        = 256
	MaxIncludeDepth = 8
	MaxNesting      = 64
	MaxStatements   = 1_000_000
)

// Error is a problem of the configuration at file:line.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Options says how to read a configuration.
type Options struct {
	// FS holds the files: the main file and every include is opened in it
	// (paths without a leading slash; ParseFile strips it).
	FS fs.FS
	// ConfigID is keepalived's `-i` (config id): lines prefixed `@ID` are
	// read only when it matches, `@^ID` only when it does not.
	ConfigID string
	// Skipped is told of each conditional line left out, when not nil.
	Skipped func(file string, line int, text string)
}

// parser holds the state of one parse: the statement count and the files
// read, shared by the includes.
type parser struct {
	opt        Options
	statements int
	files      int
	open       []string // the include chain, to refuse a loop
}

// ParseFile reads the configuration at name (an absolute path or one
// relative to opt.FS's root) and its includes.
func ParseFile(name string, opt Options) ([]*Node, error) {
	p := &parser{opt: opt}
	return p.file(name, "", 0)
}

// Parse reads the configuration data, named name; includes are opened in
// opt.FS.
func Parse(name string, data []byte, opt Options) ([]*Node, error) {
	p := &parser{opt: opt, files: 1, open: []string{name}}
	return p.parse(name, data, 0)
}

func fsPath(name string) string {
	p := strings.TrimPrefix(path.Clean(name), "/")
	if p == "" {
		return "."
	}
	return p
}

// file reads the file name, included from (file:line) at depth.
func (p *parser) file(name, from string, depth int) ([]*Node, error) {
	fail := func(msg string) error {
		if from == "" {
			return &Error{File: name, Msg: msg}
		}
		return fmt.Errorf("%s: %s %s", from, name, msg)
	}
	p.files++
	if p.files > MaxFiles {
		return nil, fail(fmt.Sprintf("is one file too many: at most %d files are read through include", MaxFiles))
	}
	if slices.Contains(p.open, name) {
		return nil, fail("includes itself (through " + strings.Join(p.open, " → ") + ")")
	}
	f, err := p.opt.FS.Open(fsPath(name))
	if err != nil {
		return nil, fail("cannot be read: " + plainError(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fail("cannot be read: " + plainError(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fail("is not a regular file")
	}
	if fi.Size() > MaxFileSize {
		return nil, fail(fmt.Sprintf("is larger than the %d bytes read", MaxFileSize))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	switch {
	case err != nil:
		return nil, fail("cannot be read: " + plainError(err))
	case len(data) > MaxFileSize:
		return nil, fail(fmt.Sprintf("is larger than the %d bytes read", MaxFileSize))
	}
	p.open = append(p.open, name)
	defer func() { p.open = p.open[:len(p.open)-1] }()
	return p.parse(name, data, depth)
}

func plainError(err error) string {
	if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err
	}
	return err.Error()
}

// line is one line's words, with its number.
type line struct {
	num   int
	words []string
}

// parse turns the text of file into statements, following includes.
func (p *parser) parse(file string, data []byte, depth int) ([]*Node, error) {
	lines, err := p.lex(file, string(data))
	if err != nil {
		return nil, err
	}
	root := &Node{Keyword: "", File: file}
	stack := []*Node{root}
	var last *Node // the statement a "{" on its own line opens
	for _, ln := range lines {
		words := ln.words
		var stmt *Node
		for len(words) > 0 {
			w := words[0]
			cur := stack[len(stack)-1]
			switch w {
			case "{":
				target := stmt
				if target == nil {
					target = last
				}
				if target == nil || target.Block {
					return nil, &Error{File: file, Line: ln.num, Msg: "\"{\" opens no block: a block is `name arguments {`"}
				}
				if len(stack) > MaxNesting {
					return nil, &Error{File: file, Line: ln.num, Msg: fmt.Sprintf("blocks nest deeper than %d levels", MaxNesting)}
				}
				target.Block = true
				stack = append(stack, target)
				stmt, last = nil, nil
				words = words[1:]
			case "}":
				if len(stack) == 1 {
					return nil, &Error{File: file, Line: ln.num, Msg: "\"}\" closes no block"}
				}
				stack = stack[:len(stack)-1]
				stmt, last = nil, nil
				words = words[1:]
			default:
				if stmt != nil {
					stmt.Args = append(stmt.Args, w)
					words = words[1:]
					continue
				}
				p.statements++
				if p.statements > MaxStatements {
					return nil, &Error{File: file, Line: ln.num, Msg: fmt.Sprintf("more than %d statements", MaxStatements)}
				}
				stmt = &Node{Keyword: w, File: file, Line: ln.num}
				if w == "include" {
					rest := words[1:]
					end := slices.IndexFunc(rest, func(s string) bool { return s == "{" || s == "}" })
					if end < 0 {
						end = len(rest)
					}
					nodes, err := p.include(file, ln.num, rest[:end], depth)
					if err != nil {
						return nil, err
					}
					cur.Children = append(cur.Children, nodes...)
					words, stmt = rest[end:], nil
					continue
				}
				cur.Children = append(cur.Children, stmt)
				words = words[1:]
			}
		}
		if stmt != nil {
			last = stmt
		}
	}
	if len(stack) > 1 {
		open := stack[len(stack)-1]
		return nil, &Error{File: file, Line: open.Line, Msg: fmt.Sprintf("block %s opened here is not closed by the end of the file (a \"}\" is missing)", open.Keyword)}
	}
	return root.Children, nil
}

// include reads the files an `include` names (a glob, relative to the
// including file's folder, as keepalived reads it).
func (p *parser) include(file string, num int, args []string, depth int) ([]*Node, error) {
	at := fmt.Sprintf("%s:%d", file, num)
	if len(args) != 1 {
		return nil, &Error{File: file, Line: num, Msg: "include takes one file name or pattern"}
	}
	if depth+1 > MaxIncludeDepth {
		return nil, &Error{File: file, Line: num, Msg: fmt.Sprintf("includes nest deeper than %d levels", MaxIncludeDepth)}
	}
	pattern := args[0]
	if !path.IsAbs(pattern) {
		pattern = path.Join(path.Dir(file), pattern)
	}
	matches, err := fs.Glob(p.opt.FS, fsPath(pattern))
	if err != nil {
		return nil, &Error{File: file, Line: num, Msg: fmt.Sprintf("include %s is not a valid pattern", args[0])}
	}
	if len(matches) == 0 {
		return nil, &Error{File: file, Line: num, Msg: fmt.Sprintf("include %s matches no file", args[0])}
	}
	slices.Sort(matches)
	var out []*Node
	for _, m := range matches {
		if path.IsAbs(pattern) || strings.HasPrefix(file, "/") {
			m = "/" + m
		}
		nodes, err := p.file(m, at, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, nodes...)
	}
	return out, nil
}

// lex splits the text into lines of words: `#` and `!` start a comment
// (outside quotes), "quoted strings" are one word, braces are words of
// their own. Lines with `@ID` are kept as Options.ConfigID says.
func (p *parser) lex(file, text string) ([]line, error) {
	var out []line
	for i, raw := range strings.Split(text, "\n") {
		num := i + 1
		raw = strings.TrimSuffix(raw, "\r")
		if strings.ContainsFunc(raw, func(r rune) bool { return r < ' ' && r != '\t' }) || strings.ContainsRune(raw, 0x7f) {
			return nil, &Error{File: file, Line: num, Msg: "holds a control character: keepalived.conf is text"}
		}
		trimmed := strings.TrimLeft(raw, " \t")
		if strings.HasPrefix(trimmed, "@") {
			id, rest, _ := strings.Cut(trimmed[1:], " ")
			rest = strings.TrimLeft(rest, " \t")
			id, _, _ = strings.Cut(id, "\t")
			keep := id == p.opt.ConfigID
			if strings.HasPrefix(id, "^") {
				keep = id[1:] != p.opt.ConfigID
			}
			if !keep {
				if p.opt.Skipped != nil {
					p.opt.Skipped(file, num, trimmed)
				}
				continue
			}
			trimmed = rest
		}
		if strings.HasPrefix(trimmed, "$") {
			return nil, &Error{File: file, Line: num, Msg: "parameter definitions and substitution ($NAME) are not read: expand them first (keepalived -t -d prints the expanded configuration)"}
		}
		if strings.HasPrefix(trimmed, "~SEQ") || strings.HasPrefix(trimmed, "~") {
			return nil, &Error{File: file, Line: num, Msg: "sequence expansion (~SEQ) is not read: expand it first"}
		}
		words, err := splitWords(trimmed)
		if err != nil {
			return nil, &Error{File: file, Line: num, Msg: err.Error()}
		}
		if len(words) > 0 {
			out = append(out, line{num: num, words: words})
		}
	}
	return out, nil
}

// splitWords splits a line: whitespace separates, a quoted string is one
// word (without its quotes), a comment ends the line, a brace is a word.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false // inside a word
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			end := strings.IndexByte(s[i+1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("a quoted string is not closed on its line")
			}
			cur.WriteString(s[i+1 : i+1+end])
			in = true
			i += end + 1
		case c == ' ' || c == '\t':
			flush()
		case (c == '#' || c == '!') && !in:
			flush()
			return words, nil
		case c == '{' || c == '}':
			flush()
			words = append(words, string(c))
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return words, nil
}
