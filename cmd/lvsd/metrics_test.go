package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent/director"
	"github.com/lvsd/lvsd/agent/hooks"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/agent/views"
)

// exported are the series both roles describe, by name, with their labels.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 512)
	views.NewCollector(nil, "").Describe(ch)
	realserver.NewCollector(nil, "").Describe(ch)
	(*hooks.Runner)(nil).Describe(ch)
	director.NewHealthMetrics(nil).Describe(ch)
	close(ch)
	out := map[string][]string{}
	for d := range ch {
		// The client library shows a Desc only through String:
		// Desc{fqName: "…", help: "…", …, variableLabels: {a,b}}.
		s := d.String()
		_, rest, _ := strings.Cut(s, `fqName: "`)
		name, _, _ := strings.Cut(rest, `"`)
		labels := s[strings.LastIndex(s, "variableLabels: {")+len("variableLabels: {"):]
		labels = strings.TrimSuffix(labels, "}}")
		out[name] = nil
		if labels != "" {
			out[name] = strings.Split(labels, ",")
		}
	}
	if len(out) < 40 {
		t.Fatalf("only %d series described", len(out))
	}
	return out
}

// documented reads the metric tables of docs/operations.md: name → type.
func documented(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`(lvsd_[a-z0-9_]+)`")
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`lvsd_") {
			continue
		}
		for _, m := range names.FindAllStringSubmatch(cells[1], -1) {
			out[m[1]] = strings.TrimSpace(cells[2])
		}
	}
	return out
}

// TestDocumentedMetrics: docs/operations.md lists exactly the series lvsd
// exports, no more, no fewer.
func TestDocumentedMetrics(t *testing.T) {
	got, doc := exported(t), documented(t)
	for name := range got {
		if _, ok := doc[name]; !ok {
			t.Errorf("%s is exported but not in docs/operations.md", name)
		}
	}
	for name := range doc {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/operations.md lists %s, which lvsd does not export", name)
		}
	}
}
