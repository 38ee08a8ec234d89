package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/views"
)

// writeVRRPStatus prints the virtual routers of cluster.mode vrrp: a line
// per address family, then the packets each dropped.
func writeVRRPStatus(w io.Writer, routers []views.VRRPRouterStatus) error {
	rows := [][]string{{"FAMILY", "VRID", "STATE", "PRIORITY", "MASTER", "ADVERT", "BECAME MASTER"}}
	held := 0
	for _, r := range routers {
		if r.State == "master" {
			held++
		}
		rows = append(rows, []string{r.Family, strconv.Itoa(r.VRID), r.State, strconv.Itoa(r.Priority), vrrpMaster(r),
			time.Duration(r.AdvertInterval * float64(time.Second)).String(), strconv.FormatUint(r.BecameMaster, 10)})
	}
	fmt.Fprintf(w, "vrrp: master of %d of %d virtual routers\n", held, len(routers))
	if err := writeTable(w, "  ", rows); err != nil {
		return err
	}
	for _, r := range routers {
		if len(r.Dropped) == 0 {
			continue
		}
		var total uint64
		for _, n := range r.Dropped {
			total += n
		}
		reasons := make([]string, 0, len(r.Dropped))
		for _, reason := range slices.Sorted(maps.Keys(r.Dropped)) {
			reasons = append(reasons, fmt.Sprintf("%d %s", r.Dropped[reason], reason))
		}
		fmt.Fprintf(w, "  %s VRID %d dropped %d packets: %s\n", r.Family, r.VRID, total, strings.Join(reasons, ", "))
	}
	_, err := fmt.Fprintln(w)
	return err
}

// vrrpMaster says who is master as the router knows it.
func vrrpMaster(r views.VRRPRouterStatus) string {
	switch {
	case r.State == "master":
		return "this director"
	case r.Master != "":
		return r.Master
	case r.State == "backup":
		return "none heard yet"
	}
	return "-"
}

// maxSyncProblemsShown bounds the refused and conflicting files the status
// lists.
const maxSyncProblemsShown = 20

// writeConfigSyncStatus prints cluster.config_sync on one line, and a line
// per file refused or in conflict when there are any.
func writeConfigSyncStatus(w io.Writer, s *views.ConfigSyncStatus) error {
	files := fmt.Sprintf("%s (%d published here, %d received), digest %s", filesCount(s.Records), s.Published,
		s.Records-s.Published, s.Digest[:min(len(s.Digest), 8)])
	if len(s.Refused)+len(s.Conflicts) == 0 {
		_, err := fmt.Fprintf(w, "config sync: in step, %s, none refused or in conflict\n\n", files)
		return err
	}
	fmt.Fprintf(w, "config sync: %d REFUSED, %d IN CONFLICT; %s\n", len(s.Refused), len(s.Conflicts), files)
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(s.Refused)) {
		lines = append(lines, fmt.Sprintf("refused %s: %s", name, s.Refused[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(s.Conflicts)) {
		lines = append(lines, fmt.Sprintf("conflict over %s: %s", name, s.Conflicts[name]))
	}
	for _, l := range lines[:min(len(lines), maxSyncProblemsShown)] {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if len(lines) > maxSyncProblemsShown {
		fmt.Fprintf(w, "  and %d more (lvsd status --json)\n", len(lines)-maxSyncProblemsShown)
	}
	_, err := fmt.Fprintln(w)
	return err
}

func filesCount(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}
