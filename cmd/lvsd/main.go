// Command lvsd is the LVS director and real-server agent. This package only
// parses the command line and wires the real kernel adapters into agent;
// each subcommand lives in its own file and registers in commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const defaultConfig = "/etc/lvsd/lvsd.yaml"

// command is one subcommand. Its flag set already has --config.
type command struct {
	usage string // one line: arguments and what it does
	run   func(ctx context.Context, env *env) error
	args  []string // the words it takes besides flags, which the shells complete
}

// env is what a subcommand gets: its parsed flags and arguments, and where
// to write.
type env struct {
	flags          *flag.FlagSet
	config         string
	args           []string
	stdout, stderr io.Writer
}

// commands maps a name to its subcommand; files add theirs in init.
var commands = map[string]command{
	"version": {usage: "print the version, commit and Go version (also --version, -V)", run: func(_ context.Context, e *env) error {
		fmt.Fprintln(e.stdout, versionLine())
		return nil
	}},
}

// flagSetup lets a subcommand declare its own flags before parsing.
var flagSetup = map[string]func(*flag.FlagSet){}

func main() {
	stopProfile := startCPUProfile(os.Getenv("LVSD_CPU_PROFILE"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	stopProfile()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "lvsd:", err)
	}
	os.Exit(exitCode(err))
}

func usage(w io.Writer) {
	fmt.Fprint(w, "lvsd — LVS director and real-server agent\n\nUsage:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  lvsd %-8s %s\n", n, commands[n].usage)
	}
	fmt.Fprintf(w, "\nEvery command takes --config FILE (default %s).\n", defaultConfig)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return flag.ErrHelp
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	case "--version", "-V":
		name = "version"
	}
	cmd, ok := commands[name]
	if !ok {
		usage(stderr)
		return usageError{fmt.Errorf("unknown command %q", name)}
	}
	fs := flag.NewFlagSet("lvsd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", defaultConfig, "agent configuration file")
	if setup := flagSetup[name]; setup != nil {
		setup(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // -h: the flag package printed the usage
		}
		return usageError{err}
	}
	return cmd.run(ctx, &env{flags: fs, config: *cfg, args: fs.Args(), stdout: stdout, stderr: stderr})
}

// lines indents a multi-line text for terminal output.
func lines(s string) string { return strings.TrimRight(s, "\n") + "\n" }
