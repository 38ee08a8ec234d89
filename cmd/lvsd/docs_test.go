package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestCompletionScripts: each script asks lvsd what to complete and parses
// in its shell (shells that are not installed are skipped); TestCompletions
// tests what lvsd answers.
func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		t.Run(sh, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{"completion", sh}, &out, &errOut); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "__complete") {
				t.Error("the script does not ask lvsd __complete")
			}
			path, err := exec.LookPath(sh)
			if err != nil {
				t.Skipf("%s not installed; syntax not checked", sh)
			}
			check := exec.Command(path, "-n")
			check.Stdin = &out
			if msg, err := check.CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", sh, err, msg)
			}
		})
	}
}

func TestManPage(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"man"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{".TH LVSD 8", ".SH NAME", ".SH SYNOPSIS", ".SH COMMANDS", `.B \-\-json`, ".SH FILES"} {
		if !strings.Contains(page, want) {
			t.Errorf("the man page lacks %q", want)
		}
	}
	checkRoff(t, page)
}

// TestManPage5: lvsd man 5 (and lvsd man lvsd.yaml) prints lvsd.yaml(5)
// from docs/configuration.md, which groff reads without a warning; other
// arguments are a usage error.
func TestManPage5(t *testing.T) {
	var pages []string
	for _, args := range [][]string{{"man", "5"}, {"man", "lvsd.yaml"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, out.String())
	}
	if pages[0] != pages[1] {
		t.Error("man 5 and man lvsd.yaml differ")
	}
	page := pages[0]
	for _, want := range []string{".TH LVSD.YAML 5", ".SH NAME", ".SH AGENT FILE", ".SH SERVICE FILES", `\fBreload.watch\fR`,
		`\fBrealserver.tunnel.mtu\fR`, ".SS IPVS timeouts", ".BR lvsd (8)"} {
		if !strings.Contains(page, want) {
			t.Errorf("lvsd.yaml(5) lacks %q", want)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"man", "7"}, &out, &errOut); exitCode(err) != exitUsage {
		t.Errorf("man 7: %v, want a usage error", err)
	}
	checkRoff(t, page)
}

// checkRoff has groff read page, which must pass without a warning (skipped
// without groff).
func checkRoff(t *testing.T, page string) {
	t.Helper()
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff not installed; roff not checked")
	}
	check := exec.Command(groff, "-man", "-ww", "-z")
	check.Stdin = strings.NewReader(page)
	if msg, err := check.CombinedOutput(); err != nil || len(msg) > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, msg)
	}
}
