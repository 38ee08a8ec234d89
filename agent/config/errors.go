package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
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
	case e.Line > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.File != "":
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return e.Msg
}

// List collects every problem found, so one run of `lvsd check` shows them all.
type List []*Error

func (l List) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
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
	body ast.Node
	errs *List
}

// errorf records a problem at the node found by path (a YAML path such as
// "$.backends[1].weight"); when the path is absent it points at the document.
func (d *doc) errorf(path string, format string, args ...any) {
	line, col := d.position(path)
	*d.errs = append(*d.errs, &Error{File: d.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

func (d *doc) position(path string) (int, int) {
	for p := path; p != ""; p = parentPath(p) {
		yp, err := yaml.PathString(p)
		if err != nil {
			continue
		}
		n, err := yp.FilterNode(d.body)
		if err != nil || n == nil {
			continue
		}
		if tk := valueToken(n); tk != nil {
			return tk.Position.Line, tk.Position.Column
		}
	}
	if tk := d.body.GetToken(); tk != nil {
		return tk.Position.Line, tk.Position.Column
	}
	return 0, 0
}

// valueToken returns the first token of a node; for a mapping that is the
// token of its first key, which is where a reader's eye goes.
func valueToken(n ast.Node) *token.Token {
	if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
		return m.Values[0].Key.GetToken()
	}
	return n.GetToken()
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 1 {
		return ""
	}
	return p[:i]
}

// yamlError turns a decoding error of goccy/go-yaml into an *Error with its
// position, worded for operators rather than in Go types.
func yamlError(file string, err error) *Error {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		return &Error{File: file, Msg: err.Error()}
	}
	e := &Error{File: file, Msg: ye.GetMessage()}
	if tk := ye.GetToken(); tk != nil {
		e.Line, e.Col = tk.Position.Line, tk.Position.Column
	}
	var te *yaml.TypeError
	var oe *yaml.OverflowError
	switch {
	case errors.As(err, &te) && te.Token != nil:
		e.Msg = fmt.Sprintf("%q is not valid here: want %s", te.Token.Value, kindOf(te.DstType))
	case errors.As(err, &oe):
		e.Msg = fmt.Sprintf("%s is out of range", oe.SrcNum)
	}
	return e
}

// kindOf names what a Go type accepts, in YAML words.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping of keys to values"
	}
	return "a value of another type"
}
