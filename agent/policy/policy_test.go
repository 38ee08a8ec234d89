package policy

import (
	"strconv"
	"strings"
	"testing"
)

// backends parses a compact list: "P+3 F-0" is a healthy primary reporting
// weight 3 and an unhealthy failover backend reporting weight 0. The weight
// may be left out ("P+").
func backends(t *testing.T, s string) []Backend {
	t.Helper()
	var out []Backend
	for _, f := range strings.Fields(s) {
		b := Backend{Failover: f[0] == 'F', Healthy: f[1] == '+', Weight: 1}
		if len(f) > 2 {
			w, err := strconv.Atoi(f[2:])
			if err != nil {
				t.Fatalf("bad backend %q", f)
			}
			b.Weight = w
		}
		out = append(out, b)
	}
	return out
}

func mask(r Result) string {
	var b strings.Builder
	for _, e := range r.Eligible {
		if e {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// Each case quotes the rule of seed 000, section 2.1 (确定符合条件的后端), that it checks.
func TestEligible(t *testing.T) {
	none := Policy{}
	weighted := Policy{Weighted: true}
	fo := func(ratio float64, drop bool) Policy {
		return Policy{Failover: true, Ratio: ratio, DropIfNoneHealthy: drop}
	}
	fow := func(ratio float64, drop bool) Policy {
		return Policy{Failover: true, Weighted: true, Ratio: ratio, DropIfNoneHealthy: drop}
	}
	cases := []struct {
		rule     string
		policy   Policy
		backends string
		want     string
	}{
		// 无故障切换政策，已停用加权负载均衡
		{"当至少有一个后端的健康状况良好时，符合条件的后端集包含所有健康状况良好的后端", none, "P+ P- P+", "101"},
		{"当所有后端的健康状况都不佳时，符合条件的后端集包含所有后端", none, "P- P-", "11"},
		{"unweighted: reported weights are ignored", none, "P+0 P-5", "10"},

		// 无故障切换政策，已启用加权负载均衡: 以下第一个非空的后端
		{"所有健康状况良好且权重不为零的后端", weighted, "P+2 P+0 P-3", "100"},
		{"所有健康状况不佳且权重不为零的后端", weighted, "P+0 P-3 P-0", "010"},
		{"所有健康状况良好且权重为零的后端", weighted, "P+0 P-0 P+0", "101"},
		{"所有健康状况不佳且权重为零的后端", weighted, "P-0 P-0", "11"},
		{"weighted, no failover policy: failover flags play no part", weighted, "F+3 P+0", "10"},

		// 已配置故障切换政策，已停用加权负载均衡; 至少有一个后端的健康状况良好时 (first true condition)
		{"如果没有健康状况良好的主后端，则符合条件的后端是所有健康状况良好的故障切换后端", fo(0.5, false), "P- P- F+ F-", "0010"},
		{"如果没有健康状况良好的故障切换后端，则符合条件的后端是所有健康状况良好的主后端", fo(0.9, false), "P+ P- P- F-", "1000"},
		{"如果故障切换比率设置为0.0（默认值），则符合条件的后端是所有健康状况良好的主后端", fo(0, false), "P+ P- P- F+", "1000"},
		{"健康状况良好的主后端数量与主后端总数量的比率大于或等于配置的故障切换比率 (equal)", fo(0.5, false), "P+ P- F+", "100"},
		{"健康状况良好的主后端数量与主后端总数量的比率大于或等于配置的故障切换比率 (above)", fo(0.5, false), "P+ P+ P- F+ F+", "11000"},
		{"符合条件的后端包含所有健康状况良好的故障切换后端 (ratio not met)", fo(0.5, false), "P+ P- P- F+ F+ F-", "000110"},
		// 如果没有健康状况良好的后端
		{"故障切换政策配置为在没有后端健康状况良好时舍弃新连接，则符合条件的后端集为空", fo(0.5, true), "P- F-", "00"},
		{"未配置为舍弃新连接，则健康检查不相关。符合条件的后端包含所有主后端", fo(0.5, false), "P- P- F-", "110"},
		{"drop only applies when nothing is healthy", fo(0.5, true), "P- F+", "01"},

		// 已配置故障切换政策，已启用加权负载均衡; 至少有一个后端的健康状况良好且权重非零时
		{"如果没有健康状况良好且权重不为零的主后端，则符合条件的后端为所有健康状况良好且权重不为零的故障切换后端", fow(0.5, false), "P+0 P-4 F+2 F+0", "0010"},
		{"如果没有健康状况良好且权重不为零的故障切换后端，则符合条件的后端是所有健康状况良好且权重不为零的主后端", fow(0.9, false), "P+3 P-3 F+0", "100"},
		{"如果故障切换比率设置为0.0（默认值），则符合条件的后端是所有健康状况良好且权重不为零的主后端", fow(0, false), "P+3 P+0 P-3 F+1", "1000"},
		{"健康状况良好且权重不为零的主后端数量与主后端总数量的比率大于或等于配置的故障切换比率", fow(0.5, false), "P+3 P+0 F+1", "100"},
		{"符合条件的后端包含所有健康状况良好且权重不为零的故障切换后端 (a zero weight counts against the ratio)", fow(0.5, false), "P+3 P+0 P-3 F+1", "0001"},
		// 如果没有健康状况良好且权重不为零的后端
		{"weighted: 在没有后端健康状况良好时舍弃新连接，则符合条件的后端集为空", fow(0, true), "P+0 F-2", "00"},
		{"第一个非空集: 所有健康状况不佳且权重不为零的主后端", fow(0, false), "P-2 P+0 F-2", "100"},
		{"第一个非空集: 所有健康状况不佳且权重不为零的故障切换后端", fow(0, false), "P+0 F-2 F-0", "010"},
		{"第一个非空集: 所有健康状况良好且权重为零的主后端", fow(0, false), "P+0 P-0 F+0", "100"},
		{"第一个非空集: 所有健康状况良好且权重为零的故障切换后端", fow(0, false), "P-0 F+0 F-0", "010"},
		{"第一个非空集: 所有健康状况不佳且权重为零的主后端", fow(0, false), "P-0 F-0", "10"},
		{"第一个非空集: 所有健康状况不佳且权重为零的故障切换后端", fow(0, false), "F-0 F-0", "11"},

		{"no backends at all", fow(0.5, false), "", ""},

		// lvsd: drop without a failover policy (a sorry server takes the new connections).
		{"no failover policy, drop: none healthy, none eligible", Policy{DropIfNoneHealthy: true}, "P- P-", "00"},
		{"no failover policy, drop: one healthy, as without drop", Policy{DropIfNoneHealthy: true}, "P- P+", "01"},
		{"no failover policy, weighted, drop: healthy at weight 0 is not good", Policy{Weighted: true, DropIfNoneHealthy: true}, "P+0 P-3", "00"},
		{"no failover policy, weighted, drop: one good", Policy{Weighted: true, DropIfNoneHealthy: true}, "P+0 P+3", "01"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			r := Eligible(c.policy, backends(t, c.backends))
			if got := mask(r); got != c.want {
				t.Errorf("%s with %+v: eligible %s, want %s (rule applied: %s)", c.backends, c.policy, got, c.want, r.Rule)
			}
			if r.Rule == "" {
				t.Error("no rule named")
			}
		})
	}
}
