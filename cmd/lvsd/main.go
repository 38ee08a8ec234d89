// Command lvsd is the LVS director and real-server agent. This package only
// wires the command line (spf13/cobra) to agent and the real kernel
// adapters; each subcommand lives in its own file and registers its cobra
// command in subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const defaultConfig = "/etc/lvsd/lvsd.yaml"

// env is what a subcommand gets: its parsed flags (--config and those of
// its parents included) and arguments, and where to write.
type env struct {
	name           string // the command's own name: "drain" of lvsd backend drain
	flags          *pflag.FlagSet
	config         string
	args           []string
	stdout, stderr io.Writer
}

// on says whether the boolean flag name is set.
func (e *env) on(name string) bool { return e.flags.Lookup(name).Value.String() == "true" }

// value is the flag name's value as given (or its default).
func (e *env) value(name string) string { return e.flags.Lookup(name).Value.String() }

// subcommands build the top-level commands; files add theirs in init. A
// fresh tree per run keeps one run's flag values out of the next (tests).
var subcommands []func() *cobra.Command

func main() {
	stopProfile := startCPUProfile(os.Getenv("LVSD_CPU_PROFILE"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	stopProfile()
	os.Exit(exitCode(err))
}

// run executes the command line args and reports a failure on stderr; its
// error says the exit status (exitCode).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(stdout, stderr)
	// A nil slice would make cobra read os.Args.
	root.SetArgs(append([]string{}, singleDashLongFlags(root, args)...))
	cmd, err := root.ExecuteContextC(ctx)
	var u usageError
	switch {
	case err == nil, errors.Is(err, errChangesPending):
	case errors.Is(err, errBareCommand):
		fmt.Fprint(stderr, cmd.UsageString())
		return flag.ErrHelp
	case errors.As(err, &u):
		fmt.Fprintln(stderr, "lvsd:", err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	default:
		fmt.Fprintln(stderr, "lvsd:", err)
	}
	return err
}

// errBareCommand is `lvsd` (or `lvsd backend`, `lvsd import`) without a
// command: the usage goes to stderr, exit 2.
var errBareCommand = usageError{errors.New("no command given")}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "lvsd",
		Short: "LVS director and real-server agent",
		Long: "lvsd — LVS director and real-server agent.\n\n" +
			"Flags may stand before or after a command's arguments; every command takes --config FILE (default " +
			defaultConfig + ").",
		Args:              rootArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			if v, _ := c.Flags().GetBool("version"); v {
				fmt.Fprintln(c.OutOrStdout(), versionLine())
				return nil
			}
			return errBareCommand
		},
		SuggestionsMinimumDistance: 2,
		SilenceErrors:              true,
		SilenceUsage:               true,
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().String("config", defaultConfig, "agent configuration file")
	_ = root.MarkPersistentFlagFilename("config", "yaml", "yml")
	root.Flags().BoolP("version", "V", false, "print the version, commit and Go version")
	root.AddCommand(&cobra.Command{Use: "version", Short: "print the version, commit and Go version (also --version, -V)",
		Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error { fmt.Fprintln(c.OutOrStdout(), versionLine()); return nil }})
	for _, sub := range subcommands {
		root.AddCommand(sub())
	}
	return root
}

// rootArgs refuses `lvsd nosuch` as a wrong command line, with cobra's
// suggestions ("did you mean status?").
func rootArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	suggest := ""
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		suggest = " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return usagef("unknown command %q%s", args[0], suggest)
}

// action adapts a subcommand's function to cobra.
func action(f func(context.Context, *env) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		config, err := c.Flags().GetString("config")
		if err != nil {
			return err
		}
		return f(c.Context(), &env{name: c.Name(), flags: c.Flags(), config: config, args: args, stdout: c.OutOrStdout(), stderr: c.ErrOrStderr()})
	}
}

// argCount refuses fewer than least or more than most (-1: any number)
// positional arguments, naming the missing ones from the command's Use.
func argCount(least, most int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case most >= 0 && len(args) > most:
			return usagef("%s: unexpected argument %q (usage: %s)", subcommandPath(c), args[most], c.UseLine())
		case len(args) < least:
			names := strings.Fields(c.Use)[1:]
			missing := "an argument"
			if least <= len(names) {
				missing = strings.Join(names[len(args):least], " ")
			}
			return usagef("%s: missing %s (usage: %s)", subcommandPath(c), missing, c.UseLine())
		}
		return nil
	}
}

// subcommandPath is the command's path without lvsd, which the error
// line starts with already: "backend drain".
func subcommandPath(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// parentOnly is the action of a command that only groups others (backend,
// import): without one of them the command line is wrong.
func parentOnly(usage string) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("%s", usage)
		}
		return usagef("%s: unknown action %q\n%s", subcommandPath(c), args[0], usage)
	}
}

// singleDashLongFlags turns -config FILE into --config FILE: Go's flag
// package, which lvsd's command line used before, takes long flags with
// one dash, and scripts written then keep working. Only names of lvsd's
// long flags are rewritten, and nothing after "--".
func singleDashLongFlags(root *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true} // cobra adds --help at run time
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { long[f.Name] = len(f.Name) > 1 })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, len(args))
	for i, a := range args {
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && long[name] {
			a = "-" + a
		}
		out[i] = a
	}
	return out
}

// lines indents a multi-line text for terminal output.
func lines(s string) string { return strings.TrimRight(s, "\n") + "\n" }
