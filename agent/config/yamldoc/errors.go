package yamldoc

import (
	"fmt"
	"strings"
)

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

// List collects every problem found, so that one run of a checker shows
// them all.
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

// Err is l as an error: nil when it holds no problem.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}
