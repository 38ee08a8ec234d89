package clidoc

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// The lvsd.yaml(5) man page is docs/configuration.md turned into man(7)
// roff by mdToRoff, which knows the Markdown that file uses: headings,
// paragraphs, code blocks, "- " lists, tables, `code`, **bold** and links.

var (
	mdCode = regexp.MustCompile("`([^`]*)`")
	mdBold = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// roffText escapes plain text for roff: backslashes, hyphens (minus signs
// in options and values), and non-ASCII characters as \[uXXXX].
func roffText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r == '\'':
			b.WriteString(`\(aq`)
		case r > 127:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// roffInline converts a line of Markdown prose: links become their text,
// code and bold become bold; a line starting with a dot is protected.
func roffInline(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	roffBold := func(s string) string { return emboldened(s, mdBold, roffText) } // outside code spans
	return protectLine(emboldened(s, mdCode, roffBold))
}

// emboldened sets what re's first group matches in bold, converting the
// text between the matches with outside.
func emboldened(s string, re *regexp.Regexp, outside func(string) string) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(outside(s[last:m[0]]))
		b.WriteString(`\fB` + roffText(s[m[2]:m[3]]) + `\fR`)
		last = m[1]
	}
	b.WriteString(outside(s[last:]))
	return b.String()
}

// protectLine keeps a text line from being read as a request.
func protectLine(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}

// tableCells splits a Markdown table row into its cells.
func tableCells(line string) []string {
	cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// mdToRoff writes the body of a man page from Markdown: the level-1
// heading is left out (the page has its own NAME), level 2 become
// sections, level 3 subsections; a table becomes a tagged paragraph per
// row, its first cell the tag and the others labelled with their column
// (but for "meaning"). The lines of a paragraph or list item are joined
// first: a code span may go on on the next line.
func mdToRoff(w io.Writer, md string) {
	lines := strings.Split(md, "\n")
	var header []string // of the table being read
	var text []string   // of the paragraph or list item being read
	flush := func() {
		if len(text) > 0 {
			fmt.Fprintln(w, roffInline(strings.Join(text, " ")))
			text = nil
		}
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "  ") || len(text) == 0 {
			if k := strings.TrimSpace(line); k == "" || strings.HasPrefix(k, "#") || strings.HasPrefix(k, "|") ||
				strings.HasPrefix(k, "```") || strings.HasPrefix(k, "- ") {
				flush()
			}
		}
		switch {
		case strings.HasPrefix(line, "```"):
			fmt.Fprint(w, ".PP\n.RS 4\n.nf\n")
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				fmt.Fprintln(w, protectLine(roffText(lines[i])))
			}
			fmt.Fprint(w, ".fi\n.RE\n")
		case strings.HasPrefix(line, "# "):
		case strings.HasPrefix(line, "## "):
			fmt.Fprintf(w, ".SH %s\n", roffInline(strings.ToUpper(strings.TrimPrefix(line, "## "))))
		case strings.HasPrefix(line, "### "):
			fmt.Fprintf(w, ".SS %s\n", roffInline(strings.TrimPrefix(line, "### ")))
		case strings.HasPrefix(line, "|") && header == nil:
			header = tableCells(line)
			i++ // the |---| line
		case strings.HasPrefix(line, "|"):
			writeTableRow(w, header, tableCells(line))
		case strings.TrimSpace(line) == "":
			header = nil
			fmt.Fprintln(w, ".PP")
		case strings.HasPrefix(line, "- "):
			fmt.Fprint(w, ".IP \\(bu 2\n")
			text = append(text, strings.TrimPrefix(line, "- "))
		default:
			text = append(text, strings.TrimSpace(line))
		}
	}
	flush()
}

func writeTableRow(w io.Writer, header, cells []string) {
	fmt.Fprintf(w, ".TP\n%s\n", roffInline(cells[0]))
	for j := 1; j < len(cells) && j < len(header); j++ {
		if j > 1 {
			fmt.Fprintln(w, ".br")
		}
		if header[j] == "meaning" {
			fmt.Fprintln(w, roffInline(cells[j]))
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", roffInline(header[j]), roffInline(cells[j]))
	}
}
