package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/maglev"
	"github.com/lvsd/lvsd/agent/views"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{Use: "explain CLIENT[:PORT] VIP:PORT[/PROTO]", Short: "the backend a new connection gets now, and why",
			Long: "Ask the running director which backend a new connection from CLIENT (an address, with the source port " +
				"when the scheduler hashes it) to the service at VIP:PORT gets now, and why.",
			Example: "  lvsd explain 192.0.2.7:51000 10.0.0.50:443/tcp",
			Args:    argCount(2, 2), ValidArgsFunction: completeVirtual, RunE: action(explain)}
		c.Flags().Bool("json", false, "print the explanation as JSON, for scripts")
		socketFlag(c.Flags())
		return c
	})
}

// explain asks the running director which backend a flow gets.
func explain(ctx context.Context, e *env) error {
	virtual, proto, _ := strings.Cut(e.args[1], "/")
	q, err := views.ParseExplainQuery(e.args[0], virtual, proto)
	if err != nil {
		return usageError{err}
	}
	socket, err := readSocket(e, "explain")
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.NewClient(socket).Do(ctx, "GET", views.RouteExplain+"?"+views.ExplainValues(q).Encode(), &raw); err != nil {
		return err
	}
	if e.on("json") {
		_, err := fmt.Fprintf(e.stdout, "%s\n", raw)
		return err
	}
	var x views.Explanation
	if err := json.Unmarshal(raw, &x); err != nil {
		return fmt.Errorf("agent explanation: %w", err)
	}
	return writeExplanation(e.stdout, x)
}

// writeExplanation prints x for a person: the verdict first, then the
// destinations in the kernel's order.
func writeExplanation(w io.Writer, x views.Explanation) error {
	fmt.Fprintf(w, "service %s (%s, scheduler %s %s)\n", x.Service, x.IPVSService, x.Scheduler, x.Flags)
	if x.Rule != "" {
		fmt.Fprintf(w, "eligibility: %s\n", x.Rule)
	}
	switch x.Decided {
	case "connection", "persistence":
		what := "an existing connection entry"
		if x.Decided == "persistence" {
			what = "a persistence template"
		}
		fmt.Fprintf(w, "%s -> %s: %s (%s, expires in %.0fs) decides, whatever the scheduler would choose\n",
			x.Client, x.Backend, what, x.Connection.State, x.Connection.Expires)
	case "maglev":
		fmt.Fprintf(w, "%s -> %s: Maglev slot %d of %d%s\n", x.Client, x.Backend, x.Slot, maglev.TableSize, hashed(x))
	case "none":
		fmt.Fprintf(w, "%s -> dropped: no destination can take it (slot %d%s)\n", x.Client, x.Slot, hashed(x))
	default:
		fmt.Fprintf(w, "%s -> cannot be computed: scheduler %s keeps state of its own (use mh)\n", x.Client, x.Scheduler)
	}
	if x.Rehashed > 0 {
		fmt.Fprintf(w, "the slot's holder %s takes no new connections: mh-fallback looked %d more times\n", x.SlotOwner, x.Rehashed)
	}
	if x.ClientAddress != "" {
		fmt.Fprintf(w, "client address: %s\n", x.ClientAddress)
	}
	fmt.Fprintln(w, "destinations in the kernel's order (the Maglev table depends on it):")
	for _, d := range x.Destinations {
		state := "takes new connections"
		if d.Weight == 0 {
			state = "weight 0: no new connections"
		}
		if d.Health != "" {
			state += ", " + d.Health
		}
		if d.HealthError != "" {
			state += " (" + d.HealthError + ")"
		}
		fmt.Fprintf(w, "  %-22s weight %d, slot weight %d, %d slots; %s\n", d.Address, d.Weight, d.SlotWeight, d.Slots, state)
	}
	return nil
}

// hashed says what of the client the slot comes from.
func hashed(x views.Explanation) string {
	if x.HashesPort {
		return ", from the client's address and source port"
	}
	return ", from the client's address"
}
