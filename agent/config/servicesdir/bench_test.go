package servicesdir

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
)

// BenchmarkHostileInputs loads inputs of up to 1 MiB built to be slow or
// big, as the issue 14 review found them (see docs/configuration.md,
// "Bounded work"): go test -run '^$' -bench HostileInputs -benchmem
// ./agent/config/servicesdir. Each must load, or fail, well within a second.
func BenchmarkHostileInputs(b *testing.B) {
	laughs := []string{"a0: &a0 [x, x, x, x, x, x, x, x, x, x]"}
	for i := 1; i < 9; i++ {
		laughs = append(laughs, fmt.Sprintf("a%d: &a%d [%s]", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", ")))
	}
	var services, oneVIP, keys strings.Builder
	for i := 0; services.Len() < 1000<<10; i++ {
		fmt.Fprintf(&services, "---\n{service: s%d, vip: 10.0.%d.%d, ports: [80], backends: [{address: 10.1.0.1}]}\n", i, i/250%250, i%250+1)
	}
	for i := 0; oneVIP.Len() < 1000<<10; i++ {
		fmt.Fprintf(&oneVIP, "---\n{service: s%d, vip: 10.0.0.1, ports: [%d], backends: [{address: 10.1.0.1}]}\n", i, i+1)
	}
	for i := 0; keys.Len() < 1000<<10; i++ {
		fmt.Fprintf(&keys, "k%d: 1\n", i)
	}
	for _, c := range []struct{ name, body string }{
		{"billion laughs", strings.Join(laughs, "\n") + "\nservice: *a8\n"},
		{"1 MiB flow list", "service: web\nports: [" + strings.Repeat("1,", 500_000) + "1]\n"},
		{"1 MiB block list", "service: web\nports:\n" + strings.Repeat("- 1\n", 250_000)},
		{"120k keys in a mapping", keys.String()},
		{"nesting 20k brackets", "service: " + strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000) + "\n"},
		{"nesting 200k dashes", strings.Repeat("- ", 200_000) + "x\n"},
		{"600 kB line", "service: \"" + strings.Repeat("a", 600_000) + "\"\n"},
		{"250k empty documents", strings.Repeat("---\n", 250_000)},
		{"100k documents", strings.Repeat("---\na: 1\n", 100_000)},
		{"12k services", services.String()},
		{"12k services on one VIP", oneVIP.String()},
	} {
		if len(c.body) > config.MaxFileSize {
			b.Fatalf("%s: %d bytes", c.name, len(c.body))
		}
		data := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				var errs config.List
				checkSet(appendPointers(nil, config.ParseServices("svc.yaml", data, &errs, false)), &errs)
			}
		})
	}
}
