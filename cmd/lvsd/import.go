package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/agent/importer/ipvsadm"
	"github.com/lvsd/lvsd/agent/importer/keepalived"
	"github.com/lvsd/lvsd/ipvs"
)

func init() {
	subcommands = append(subcommands, newImportCommand)
}

const importUsage = `usage: lvsd import keepalived FILE [--out DIR] [--scheduler mh] [--cluster vrrp] [--config-id ID]
       lvsd import ipvsadm [FILE|-] [--out DIR]
Without --out the files are printed and the report of every keyword goes to stderr.`

// newImportCommand is lvsd import and its two sources.
func newImportCommand() *cobra.Command {
	c := &cobra.Command{Use: "import SOURCE", Short: "write lvsd's files from keepalived.conf or an IPVS table " +
		"(--out DIR; default: print them), with a report of every keyword",
		Long: importUsage, Args: cobra.ArbitraryArgs, ValidArgsFunction: cobra.NoFileCompletions, RunE: parentOnly(importUsage)}
	c.PersistentFlags().String("out", "", "write lvsd.yaml and services.d/ into this folder (new files only) instead of printing them")
	_ = c.MarkPersistentFlagDirname("out")
	keepalived := &cobra.Command{Use: "keepalived FILE", Short: "convert keepalived.conf (its virtual_server blocks and their real servers)",
		Args: argCount(1, 1), RunE: action(importKeepalived)}
	keepalived.Flags().String("scheduler", "", "mh gives every service Maglev instead of keepalived's scheduler")
	_ = keepalived.RegisterFlagCompletionFunc("scheduler", cobra.FixedCompletions([]string{"mh"}, cobra.ShellCompDirectiveNoFileComp))
	keepalived.Flags().String("cluster", "", "vrrp writes cluster.mode vrrp, to run beside keepalived while a pair moves one director at a time, "+
		"instead of lvsd's own active-standby cluster")
	_ = keepalived.RegisterFlagCompletionFunc("cluster", cobra.FixedCompletions([]string{"vrrp"}, cobra.ShellCompDirectiveNoFileComp))
	keepalived.Flags().String("config-id", "", "the -i config id that @ID lines are read for")
	_ = keepalived.RegisterFlagCompletionFunc("config-id", cobra.NoFileCompletions)
	ipvsadm := &cobra.Command{Use: "ipvsadm [FILE|-]", Short: "convert `ipvsadm -Sn` text from FILE or stdin (-), or without one the running kernel's IPVS table",
		Args: argCount(0, 1), RunE: action(importIPVSCommand)}
	c.AddCommand(keepalived, ipvsadm)
	return c
}

// importKeepalived converts keepalived.conf: the conversion is
// agent/importer's; this reads the input and writes out.
func importKeepalived(_ context.Context, e *env) error {
	scheduler := e.value("scheduler")
	if scheduler != "" && scheduler != "mh" {
		return usagef("--scheduler takes mh (Maglev), or leave it out to keep keepalived's schedulers")
	}
	cluster := e.value("cluster")
	if cluster != "" && cluster != keepalived.ClusterVRRP {
		return usagef("--cluster takes vrrp (VRRP beside keepalived during a move), or leave it out for lvsd's own active-standby cluster")
	}
	res, err := readKeepalived(e.args[0], keepalived.ConvertOptions{Scheduler: scheduler, Cluster: cluster}, e.value("config-id"))
	if err != nil {
		return err
	}
	return writeImport(e, res)
}

// importIPVSCommand converts an IPVS table.
func importIPVSCommand(ctx context.Context, e *env) error {
	res, err := importIPVS(ctx, e.args)
	if err != nil {
		return err
	}
	return writeImport(e, res)
}

// writeImport prints the files and the report, or writes the files into
// --out.
func writeImport(e *env, res *importer.Result) error {
	if err := res.CheckServices(); err != nil {
		return fmt.Errorf("the import would write service files lvsd check refuses (please report this):\n%w", err)
	}
	out := e.value("out")
	if out == "" {
		if err := res.WriteFiles(e.stdout); err != nil {
			return err
		}
		return res.WriteReport(e.stderr)
	}
	if err := res.WriteDir(out); err != nil {
		return err
	}
	if err := res.WriteReport(e.stdout); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %d files into %s; check them with: lvsd check --config %s\n", len(res.Files), out, filepath.Join(out, "lvsd.yaml"))
	return nil
}

// readKeepalived reads and converts keepalived.conf at file, with the
// files it includes.
func readKeepalived(file string, opt keepalived.ConvertOptions, configID string) (*importer.Result, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	var skipped []importer.Entry
	nodes, err := keepalived.ParseFile(abs, keepalived.Options{FS: os.DirFS("/"), ConfigID: configID,
		Skipped: func(f string, line int, text string) { skipped = append(skipped, importer.Entry{File: f, Line: line}) }})
	if err != nil {
		return nil, err
	}
	res := keepalived.Convert(nodes, opt)
	for _, s := range skipped {
		res.Note(s.File, s.Line, "@", importer.NotMapped, "a conditional line for another config id (--config-id)")
	}
	return res, nil
}

// importIPVS reads `ipvsadm -Sn` text from a file or stdin ("-"), or
// without one the running kernel's table through package ipvs.
func importIPVS(ctx context.Context, args []string) (*importer.Result, error) {
	if len(args) == 0 {
		k, err := ipvs.Open("")
		if err != nil {
			return nil, err
		}
		defer k.Close()
		t, err := ipvsadm.Read(ctx, k)
		if err != nil {
			return nil, err
		}
		return ipvsadm.Convert(t, "kernel"), nil
	}
	name, r := args[0], io.Reader(os.Stdin)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	} else {
		name = "stdin"
	}
	data, err := io.ReadAll(io.LimitReader(r, ipvsadm.MaxTextSize+1))
	if err != nil {
		return nil, err
	}
	t, err := ipvsadm.Parse(name, data)
	if err != nil {
		return nil, err
	}
	return ipvsadm.Convert(t, name), nil
}
