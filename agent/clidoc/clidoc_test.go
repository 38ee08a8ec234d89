package clidoc

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// testCLI is a command line shaped like lvsd's: a path flag on every
// command, booleans, a number and a list, and commands taking words.
func testCLI() CLI {
	cmd := func(name, usage string, args []string, setup func(*flag.FlagSet)) Command {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.String("config", "/etc/lvsd/lvsd.yaml", "agent configuration file")
		if setup != nil {
			setup(fs)
		}
		c := Command{Name: name, Usage: usage, Args: args}
		fs.VisitAll(func(f *flag.Flag) { c.Flags = append(c.Flags, f) })
		return c
	}
	return CLI{Version: "1.2-rc1", DefaultConfig: "/etc/lvsd/lvsd.yaml", PathFlags: map[string]bool{"config": true, "socket": true},
		Commands: []Command{
			cmd("check", "validate the configuration, touch nothing (exit 0 or 1)", nil, nil),
			cmd("completion", "print a shell completion script: completion bash|zsh|fish", []string{"bash", "zsh", "fish"}, nil),
			cmd("man", "print the lvsd(8) man page (roff); man 5: lvsd.yaml(5)", []string{"8", "5", "lvsd.yaml"}, nil),
			cmd("status", "show the agent's status: [service]", nil, func(fs *flag.FlagSet) {
				fs.Bool("json", false, "print the agent's status as JSON, for scripts")
				fs.String("socket", "", "the agent's local API socket (default: api.socket of the agent file)")
				fs.String("service", "", "only these services: comma-separated names or globs (web-*)")
				fs.Bool("connections", false, "the kernel's IPVS connection entries (as ipvsadm -Lnc)")
				fs.Int("limit", 100, "with --connections: list at most this many entries")
			}),
		}}
}

// TestCompletionScripts: each script names every command and flag and
// parses in its shell (shells that are not installed are skipped).
func TestCompletionScripts(t *testing.T) {
	c := testCLI()
	for sh, write := range map[string]func(io.Writer) error{"bash": c.BashCompletion, "zsh": c.ZshCompletion, "fish": c.FishCompletion} {
		t.Run(sh, func(t *testing.T) {
			var out bytes.Buffer
			if err := write(&out); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"check", "completion", "man", "status", "json", "limit", "zsh", "lvsd.yaml"} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the script does not mention %q", w)
				}
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

// bashComplete runs the bash script on a command line whose last word
// is being completed, and returns what bash offers.
func bashComplete(t *testing.T, words ...string) string {
	t.Helper()
	var script bytes.Buffer
	if err := testCLI().BashCompletion(&script); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = strconv.Quote(w)
	}
	prog := script.String() + `
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=` + strconv.Itoa(len(words)-1) + `
compopt() { :; }
_lvsd
printf '%s\n' "${COMPREPLY[@]}"
`
	out, err := exec.Command("bash", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", words, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestBashCompletionCompletes drives the bash function like bash does.
func TestBashCompletionCompletes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	for line, want := range map[string]string{
		"lvsd sta":                      "status",
		"lvsd status --j":               "--json",
		"lvsd completion z":             "zsh",
		"lvsd man lvsd.y":               "lvsd.yaml",
		"lvsd status --connections --l": "--limit",
	} {
		if got := bashComplete(t, strings.Fields(line)...); got != want {
			t.Errorf("%q completes to %q, want %q", line, got, want)
		}
	}
	// A path flag completes files.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lvsd.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := bashComplete(t, "lvsd", "check", "--config", filepath.Join(dir, "lvsd.ya")), filepath.Join(dir, "lvsd.yaml"); got != want {
		t.Errorf("--config completes to %q, want %q", got, want)
	}
}

// A flag whose value is not a path (--limit N, --service NAMES) gets no
// completion: neither files nor the command's flags.
func TestBashCompletionNoValueWords(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	for _, flagName := range []string{"--limit", "--service"} {
		if got := bashComplete(t, "lvsd", "status", flagName, ""); got != "" {
			t.Errorf("after %s: %q offered, want nothing", flagName, got)
		}
	}
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
