// Command lvsd-echo runs the e2e echo server (package
// github.com/lvsd/lvsd/e2e/echo) as a standalone process in the current
// network namespace, for demos where the real server is started with
// `ip netns exec NS lvsd-echo -name rs1 -tcp 80,8080 -http 8000 -udp 53`.
// It prints one "lvsd-echo ready …" line on stdout once every port
// listens, and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/lvsd/lvsd/e2e/echo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lvsd-echo:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("lvsd-echo", flag.ContinueOnError)
	name := fs.String("name", host, "server name put in every answer (no spaces)")
	tcp := fs.String("tcp", "", "plain TCP line-protocol ports, comma-separated (e.g. 80,8080)")
	httpPorts := fs.String("http", "", "HTTP ports, comma-separated (GET / and GET /healthz)")
	udp := fs.String("udp", "", "UDP ports, comma-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var cfg echo.Config
	var err error
	for _, p := range []struct {
		list string
		dst  *[]uint16
	}{{*tcp, &cfg.TCP}, {*httpPorts, &cfg.HTTP}, {*udp, &cfg.UDP}} {
		if *p.dst, err = ports(p.list); err != nil {
			return err
		}
	}
	if len(cfg.TCP)+len(cfg.HTTP)+len(cfg.UDP) == 0 {
		return errors.New("no ports: use -tcp, -http and/or -udp")
	}
	srv, err := echo.Serve(ctx, nil, *name, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "lvsd-echo ready name=%s tcp=%s http=%s udp=%s\n", *name, *tcp, *httpPorts, *udp)
	<-ctx.Done()
	return srv.Close()
}

// ports parses "80,8080".
func ports(list string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}
