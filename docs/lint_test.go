package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// developmentPages are written for whoever changes lvsd, not for who runs
// it: they may speak of how the code came to be.
var developmentPages = map[string]bool{"architecture.md": true}

// workWords are phrases from how lvsd is developed — work items, design
// sources, the test machine's internals, notes to self — that mean nothing to
// an operator. Each is a pattern and the reason it is refused.
var workWords = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(?i)\bissue(s)? #?\d+|\bthe issue'?s\b|\bissue's\b`), "a work item: say what the figure or rule is, not which item asked for it"},
	{regexp.MustCompile(`(?i)\bseeds? \d+|\bthe seeds?\b|\bseed's\b`), "a design source: say what lvsd does (a random schedule's seed is fine)"},
	{regexp.MustCompile(`(?i)\b(first|second|third|fourth|fifth|sixth|seventh|this|last|previous|next|earlier|later|mid)[ -]session\b|\bsession's (code|runs?|table)\b`), "a work period: give the date and the command"},
	{regexp.MustCompile(`(?i)\bto be re-?measured\b`), "a promise to ourselves: give the figure and its conditions, or leave it out"},
	{regexp.MustCompile(`\bTCG\b|(?i)\b(software )?emulat(ion|ed)\b`), "the test machine's internals: say \"in the test VM\" (performance.md explains how to read its times)"},
	{regexp.MustCompile(`(?i)\bhelpers?'? work\b`), "a work arrangement"},
}

// TestOperatorPagesSpeakToOperators keeps the README and the operator pages
// free of words from lvsd's own development.
func TestOperatorPagesSpeakToOperators(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	checked := 0
	for _, page := range pages {
		if developmentPages[filepath.Base(page)] {
			continue
		}
		checked++
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			for _, w := range workWords {
				if m := w.re.FindString(sc.Text()); m != "" {
					t.Errorf("%s:%d: %q: %s", page, line, m, w.why)
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d pages; the test runs in the wrong directory?", checked)
	}
}

func TestWorkWordsCatch(t *testing.T) {
	for _, s := range []string{"Until issue 16 every director", "the issue's goal", "the seed's last resort", "Seed 000's 60 s", "as the seed says",
		"in the fifth session", "the session's code at 8b9d158", "to be re-measured in the CI run", "under qemu/TCG",
		"under software emulation"} {
		found := false
		for _, w := range workWords {
			found = found || w.re.MatchString(s)
		}
		if !found {
			t.Errorf("%q passes", s)
		}
	}
	for _, s := range []string{"each BGP session", "the session's local address", "a BFD session", "persistence (per-session tracking)",
		"issued", "tissue", "a failed run prints its seed", "SEED=1234"} {
		for _, w := range workWords {
			if w.re.MatchString(s) {
				t.Errorf("%q refused by %s", s, w.re)
			}
		}
	}
}
