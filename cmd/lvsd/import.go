package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lvsd/lvsd/agent/importer"
	"github.com/lvsd/lvsd/agent/importer/ipvsadm"
	"github.com/lvsd/lvsd/agent/importer/keepalived"
	"github.com/lvsd/lvsd/ipvs"
)

func init() {
	commands["import"] = command{
		usage: "keepalived FILE | ipvsadm [FILE|-]: write lvsd's files from keepalived.conf or an IPVS table (--out DIR; default: print them), with a report of every keyword",
		run:   importConfig,
		args:  []string{"keepalived", "ipvsadm"},
	}
	flagSetup["import"] = func(fs *flag.FlagSet) {
		fs.String("out", "", "write lvsd.yaml and services.d/ into this folder (new files only) instead of printing them")
		fs.String("scheduler", "", "keepalived: mh gives every service Maglev instead of keepalived's scheduler")
		fs.String("config-id", "", "keepalived: the -i config id that @ID lines are read for")
	}
}

// importConfig converts another load balancer's configuration: the
// conversion is agent/importer's; this reads the input and writes out.
func importConfig(ctx context.Context, e *env) error {
	args, err := interspersed(e.flags, e.args)
	if err != nil {
		return usageError{err}
	}
	flagValue := func(name string) string { return e.flags.Lookup(name).Value.String() }
	var res *importer.Result
	switch {
	case len(args) == 2 && args[0] == "keepalived":
		res, err = importKeepalived(args[1], flagValue("scheduler"), flagValue("config-id"))
	case len(args) >= 1 && len(args) <= 2 && args[0] == "ipvsadm":
		if flagValue("scheduler") != "" || flagValue("config-id") != "" {
			return usagef("--scheduler and --config-id are for lvsd import keepalived")
		}
		res, err = importIPVS(ctx, args[1:])
	default:
		return usagef("usage: lvsd import keepalived FILE [--out DIR] [--scheduler mh] [--config-id ID] | lvsd import ipvsadm [FILE|-] [--out DIR]")
	}
	if err != nil {
		return err
	}
	if err := res.CheckServices(); err != nil {
		return fmt.Errorf("the import would write service files lvsd check refuses (please report this):\n%w", err)
	}
	out := flagValue("out")
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

func importKeepalived(file, scheduler, configID string) (*importer.Result, error) {
	if scheduler != "" && scheduler != "mh" {
		return nil, usagef("--scheduler takes mh (Maglev), or leave it out to keep keepalived's schedulers")
	}
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
	res := keepalived.Convert(nodes, keepalived.ConvertOptions{Scheduler: scheduler})
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
