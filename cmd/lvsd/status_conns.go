package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
)

// statusConnections lists the kernel's IPVS connection table as the agent
// reads it (lvsd status --connections), bounded by --limit.
func statusConnections(ctx context.Context, e *env, asJSON bool) error {
	for _, other := range []string{"all", "summary", "problems", "stats", "rate"} {
		if e.flags.Lookup(other).Value.String() == "true" {
			return usagef("lvsd status: --connections and --%s: choose one", other)
		}
	}
	limit, err := strconv.Atoi(e.flags.Lookup("limit").Value.String())
	if err != nil || limit < 1 || limit > views.MaxConnectionLimit {
		return usagef("lvsd status: --limit %s: want a whole number from 1 to %d", e.flags.Lookup("limit").Value, views.MaxConnectionLimit)
	}
	socket, err := readSocket(e, "status")
	if err != nil {
		return err
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	for _, n := range serviceFlag(e) {
		q.Add("service", n)
	}
	c := api.NewClient(socket)
	c.MaxAnswer, c.Timeout = 256<<20, api.LongestWait // reading a table of millions takes seconds
	raw, err := c.Fetch(ctx, "GET", views.RouteConnections+"?"+q.Encode())
	if err != nil {
		return err
	}
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	if asJSON {
		err = printIndented(out, raw)
	} else {
		var list views.ConnectionList
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("agent connections: %w", err)
		}
		err = writeConnections(out, list)
	}
	if err != nil {
		return err
	}
	return out.Flush()
}

// serviceFlag is --service split at commas.
func serviceFlag(e *env) []string {
	var names []string
	if v := e.flags.Lookup("service").Value.String(); v != "" {
		for _, n := range strings.Split(v, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	return names
}

// writeConnections prints entries as `ipvsadm -Lnc` does, with the
// service each belongs to, then what the limit left out.
func writeConnections(w io.Writer, list views.ConnectionList) error {
	if list.Matched == 0 {
		_, err := fmt.Fprintln(w, "no IPVS connection entries")
		return err
	}
	rows := make([][]string, 0, 1+len(list.Connections))
	rows = append(rows, []string{"PRO", "EXPIRE", "STATE", "SOURCE", "VIRTUAL", "DESTINATION", "SERVICE"})
	for _, c := range list.Connections {
		service := c.Service
		if service == "" {
			service = "-" // not lvsd's
		}
		rows = append(rows, []string{strings.ToUpper(c.Protocol), expire(c.Expires), c.State, c.Client, c.Virtual, c.Destination,
			service})
	}
	if err := writeTable(w, "", rows); err != nil {
		return err
	}
	if list.Omitted > 0 {
		_, err := fmt.Fprintf(w, "\n%d of %d entries shown, %d left out (--limit N shows more, --service NAME narrows)\n",
			len(list.Connections), list.Matched, list.Omitted)
		return err
	}
	return nil
}

// expire is ipvsadm's mm:ss of an entry's remaining time.
func expire(seconds float64) string {
	s := int(seconds)
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
