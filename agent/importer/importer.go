// Package importer holds what `lvsd import` produces from another load
// balancer's configuration (keepalived.conf in importer/keepalived, an
// IPVS table in importer/ipvsadm): the files to write and a report of what
// each input keyword became. The converters are pure: they read no host
// state and write nothing; WriteDir writes the result where the operator
// asked.
package importer

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
)

// File is one file to write, at Path relative to the output folder.
type File struct {
	Path    string
	Content string
}

// Outcome is what became of an input keyword.
type Outcome int

// Outcomes, in the order the report lists them.
const (
	Mapped       Outcome = iota // lvsd does the same
	Approximated                // lvsd does something close; Detail says how it differs
	NotMapped                   // lvsd has no equivalent; Detail says why or what to do
)

func (o Outcome) String() string {
	switch o {
	case Mapped:
		return "mapped"
	case Approximated:
		return "approximated"
	}
	return "not mapped"
}

// Entry is one line of the report: the keyword at file:line and what it
// became.
type Entry struct {
	File    string
	Line    int
	Keyword string
	Outcome Outcome
	Detail  string
}

// Result is a conversion's output.
type Result struct {
	Files  []File
	Report []Entry
}

// Note adds a report entry.
func (r *Result) Note(file string, line int, keyword string, o Outcome, format string, args ...any) {
	r.Report = append(r.Report, Entry{File: file, Line: line, Keyword: keyword, Outcome: o, Detail: fmt.Sprintf(format, args...)})
}

// Counts returns how many entries have each outcome.
func (r *Result) Counts() (mapped, approximated, notMapped int) {
	for _, e := range r.Report {
		switch e.Outcome {
		case Mapped:
			mapped++
		case Approximated:
			approximated++
		default:
			notMapped++
		}
	}
	return
}

// WriteReport prints the report: the entries in file and line order, one
// per line, `file:line: keyword: outcome: detail`, and a summary.
func (r *Result) WriteReport(w io.Writer) error {
	entries := slices.Clone(r.Report)
	slices.SortStableFunc(entries, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	var b strings.Builder
	for _, e := range entries {
		where := e.File
		if e.Line > 0 {
			where += ":" + strconv.Itoa(e.Line)
		}
		fmt.Fprintf(&b, "%s: %s: %s", where, e.Keyword, e.Outcome)
		if e.Detail != "" {
			b.WriteString(": " + e.Detail)
		}
		b.WriteByte('\n')
	}
	m, a, n := r.Counts()
	fmt.Fprintf(&b, "%d keywords: %d mapped, %d approximated, %d not mapped; %d files\n", m+a+n, m, a, n, len(r.Files))
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteFiles prints every file, each under a `# ==> PATH <==` line, for a
// run that writes nothing.
func (r *Result) WriteFiles(w io.Writer) error {
	var b strings.Builder
	for i, f := range r.Files {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "# ==> %s <==\n%s", f.Path, f.Content)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDir writes every file into dir (created if missing, mode 0755;
// files 0644), and its services.d folder. A file that exists already is an error, so an import never
// overwrites an operator's file.
func (r *Result) WriteDir(dir string) error {
	for _, f := range r.Files {
		if _, err := os.Lstat(filepath.Join(dir, f.Path)); err == nil {
			return fmt.Errorf("%s exists already: import into an empty folder", filepath.Join(dir, f.Path))
		}
	}
	// The agent file names services.d: it must exist even with no service.
	if err := os.MkdirAll(filepath.Join(dir, "services.d"), 0o755); err != nil {
		return err
	}
	for _, f := range r.Files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, werr := fh.WriteString(f.Content)
		if err := errors.Join(werr, fh.Close()); err != nil {
			return err
		}
	}
	return nil
}

// CheckServices validates every service file of the result as `lvsd
// check` does (strict modes off: the files are not in place yet). A
// problem is a bug of the converter, which should have left the setting
// out with a report entry instead.
func (r *Result) CheckServices() error {
	var errs config.List
	names := map[string]string{}
	for _, f := range r.Files {
		if !strings.HasPrefix(f.Path, "services.d/") {
			continue
		}
		for _, s := range config.ParseServices(f.Path, []byte(f.Content), &errs, true) {
			if other, ok := names[s.Name]; ok {
				errs = append(errs, &config.Error{File: f.Path, Msg: fmt.Sprintf("service %q is also in %s", s.Name, other)})
			}
			names[s.Name] = f.Path
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
