package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promQL finds the metric and label names an expression uses.
var (
	metricRef = regexp.MustCompile(`\blvsd_[a-zA-Z0-9_]+`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)
	grouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	labelVals = regexp.MustCompile(`label_values\([^,]*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// checkExpr reports the metrics expr uses that lvsd does not export, and
// the labels none of its metrics has (beyond instance and job, which
// Prometheus adds, and le of histogram buckets).
func checkExpr(t *testing.T, where, expr string, series map[string][]string, types map[string]string) {
	t.Helper()
	allowed := map[string]bool{"instance": true, "job": true}
	used := metricRef.FindAllString(expr, -1)
	if len(used) == 0 && !strings.Contains(expr, "up{") {
		t.Errorf("%s: %q uses no lvsd series", where, expr)
	}
	for _, m := range used {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && types[b] == "histogram" {
				base = b
				allowed["le"] = allowed["le"] || suffix == "_bucket"
			}
		}
		labels, ok := series[base]
		if !ok {
			t.Errorf("%s: %s is not a series lvsd exports", where, m)
			continue
		}
		for _, l := range labels {
			allowed[l] = true
		}
	}
	var labels []string
	for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
		labels = append(labels, m[1])
	}
	for _, m := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	for _, m := range labelVals.FindAllStringSubmatch(expr, -1) {
		labels = append(labels, m[1])
	}
	for _, l := range labels {
		if !allowed[l] {
			t.Errorf("%s: %q groups or matches on label %q, which none of its series has", where, expr, l)
		}
	}
}

// TestAlertRules: every rule of examples/prometheus/lvsd-alerts.yaml uses
// series and labels lvsd exports, and says how bad and what to do.
// (promtool check rules and promtool test rules run in `make unit`.)
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../../examples/prometheus/lvsd-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	series, types := exported(t), documented(t)
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			n++
			checkExpr(t, r.Alert, r.Expr, series, types)
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q is not critical, warning or info", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: wants a summary and a description", r.Alert)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d rules", n)
	}
}

// dashboardPanel is what TestDashboard reads of a Grafana panel.
type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// TestDashboard: every query of examples/prometheus/lvsd-dashboard.json
// (panels and variables) uses series and labels lvsd exports; panels use
// the data source variable, have unique ids and do not overlap.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../examples/prometheus/lvsd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string           `json:"uid"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	series, types := exported(t), documented(t)
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			checkExpr(t, "variable "+v.Name, v.Definition, series, types)
		}
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	var queries int
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if other, ok := cells[[2]int{x, y}]; ok {
						t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: data source is not ${datasource}", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				checkExpr(t, "panel "+p.Title, q.Expr, series, types)
			}
		}
	}
	walk(d.Panels)
	if d.UID == "" || queries < 20 {
		t.Errorf("uid %q, %d queries", d.UID, queries)
	}
}
