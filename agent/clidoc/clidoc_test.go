package clidoc

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// testCLI is a command line shaped like lvsd's: a path flag on every
// command, booleans, a number and a list.
func testCLI() CLI {
	cmd := func(name, usage string, setup func(*flag.FlagSet)) Command {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.String("config", "/etc/lvsd/lvsd.yaml", "agent configuration file")
		if setup != nil {
			setup(fs)
		}
		c := Command{Name: name, Usage: usage}
		fs.VisitAll(func(f *flag.Flag) { c.Flags = append(c.Flags, f) })
		return c
	}
	return CLI{Version: "1.2-rc1", DefaultConfig: "/etc/lvsd/lvsd.yaml",
		Commands: []Command{
			cmd("check", "validate the configuration, touch nothing (exit 0 or 1)", nil),
			cmd("man", "[8|5|lvsd.yaml]: print the lvsd(8) man page (roff); man 5: lvsd.yaml(5)", nil),
			cmd("status", "show the agent's status: [service]", func(fs *flag.FlagSet) {
				fs.Bool("json", false, "print the agent's status as JSON, for scripts")
				fs.String("socket", "", "the agent's local API socket (default: api.socket of the agent file)")
				fs.String("service", "", "only these services: comma-separated names or globs (web-*)")
				fs.Bool("connections", false, "the kernel's IPVS connection entries (as ipvsadm -Lnc)")
				fs.Int("limit", 100, "with --connections: list at most this many entries")
			}),
		}}
}

func TestManPage(t *testing.T) {
	var out bytes.Buffer
	if err := testCLI().ManPage(&out); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{`.TH LVSD 8 "" "lvsd 1.2\-rc1"`, ".SH NAME", ".SH SYNOPSIS", ".SH COMMANDS", ".B status",
		`.B \-\-json`, `.BI "\-\-limit " value`, ".SH FILES", `(default /etc/lvsd/lvsd.yaml)`} {
		if !strings.Contains(page, want) {
			t.Errorf("the man page lacks %q", want)
		}
	}
	if strings.Contains(page, `.BI "\-\-config "`) {
		t.Error("the man page lists --config under a command; every command takes it")
	}
	checkRoff(t, page)
}

// TestConfigManPage: lvsd.yaml(5) from docs/configuration.md, which groff
// reads without a warning.
func TestConfigManPage(t *testing.T) {
	var out bytes.Buffer
	if err := ConfigManPage(&out, "1.2-rc1"); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{`.TH LVSD.YAML 5 "" "lvsd 1.2\-rc1"`, ".SH NAME", ".SH AGENT FILE", ".SH SERVICE FILES",
		`\fBreload.watch\fR`, `\fBrealserver.tunnel.mtu\fR`, ".SS IPVS timeouts", ".BR lvsd (8)"} {
		if !strings.Contains(page, want) {
			t.Errorf("lvsd.yaml(5) lacks %q", want)
		}
	}
	checkRoff(t, page)
}

// TestMarkdownToRoff: the Markdown docs/configuration.md uses, in roff
// (testdata/mdroff.md, mdroff.golden).
func TestMarkdownToRoff(t *testing.T) {
	md, err := os.ReadFile("testdata/mdroff.md")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	mdToRoff(&b, string(md))
	path := filepath.Join("testdata", "mdroff.golden")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("got:\n%s\nwant:\n%s", b.Bytes(), want)
	}
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
