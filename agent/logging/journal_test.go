package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

func TestFieldName(t *testing.T) {
	for key, want := range map[string]string{
		"service":               "SERVICE",
		"ipvs_services":         "IPVS_SERVICES",
		"err":                   "ERR",
		"vip":                   "VIP",
		"http.status":           "HTTP_STATUS",
		"_private":              "PRIVATE",
		"2fa":                   "LVSD_2FA",
		"message":               "LVSD_MESSAGE",
		"priority":              "LVSD_PRIORITY",
		"MixedCase-key":         "MIXEDCASE_KEY",
		"ünïcode":               "N_CODE",
		strings.Repeat("k", 70): strings.Repeat("K", 64),
	} {
		if got := fieldName(key); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", key, got, want)
		}
	}
}

// journalName is what journald accepts from clients (sd_journal_sendv).
var journalName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// sent is one journal entry as the fake socket received it.
type sent struct {
	msg    string
	prio   journal.Priority
	fields map[string]string
}

func TestJournalHandlerFields(t *testing.T) {
	var got []sent
	send := func(msg string, p journal.Priority, f map[string]string) error {
		got = append(got, sent{msg, p, f})
		return nil
	}
	var stderr bytes.Buffer
	log := slog.New(newJournalHandler(send, slog.NewTextHandler(&stderr, nil), slog.LevelDebug))
	log = log.With("role", "director")
	log.Info("applied", "op", "add-destination", "service", "web", "vip", "10.0.0.50", "backend", "10.0.0.11:80")
	log.WithGroup("health").Warn("backend down", "event", "fall", slog.Group("check", "type", "http"))
	log.Error("reading kernel state", "err", errors.New("netlink: boom"))
	log.Debug("tick")

	if stderr.Len() != 0 {
		t.Errorf("nothing should reach stderr while the journal works, got %q", stderr.String())
	}
	if len(got) != 4 {
		t.Fatalf("sent %d entries, want 4", len(got))
	}
	want := map[string]string{"ROLE": "director", "OP": "add-destination", "SERVICE": "web", "VIP": "10.0.0.50",
		"BACKEND": "10.0.0.11:80", "SYSLOG_IDENTIFIER": "lvsd"}
	for k, v := range want {
		if got[0].fields[k] != v {
			t.Errorf("entry 0: %s=%q, want %q (all: %v)", k, got[0].fields[k], v, got[0].fields)
		}
	}
	if got[0].msg != "applied" || got[0].prio != journal.PriInfo {
		t.Errorf("entry 0: message %q priority %d", got[0].msg, got[0].prio)
	}
	if !strings.HasSuffix(got[0].fields["CODE_FILE"], "journal_test.go") || got[0].fields["CODE_FUNC"] == "" {
		t.Errorf("entry 0: CODE_FILE %q CODE_FUNC %q", got[0].fields["CODE_FILE"], got[0].fields["CODE_FUNC"])
	}
	if f := got[1].fields; f["HEALTH_EVENT"] != "fall" || f["HEALTH_CHECK_TYPE"] != "http" || f["ROLE"] != "director" ||
		got[1].prio != journal.PriWarning {
		t.Errorf("entry 1 (groups): priority %d fields %v", got[1].prio, f)
	}
	if got[2].fields["ERR"] != "netlink: boom" || got[2].prio != journal.PriErr {
		t.Errorf("entry 2: priority %d ERR %q", got[2].prio, got[2].fields["ERR"])
	}
	if got[3].prio != journal.PriDebug {
		t.Errorf("entry 3: priority %d, want debug", got[3].prio)
	}
	for _, e := range got {
		for name := range e.fields {
			if !journalName.MatchString(name) || len(name) > 64 {
				t.Errorf("field %q is not a name journald accepts", name)
			}
		}
	}
}

// TestJournalHandlerFallsBackVisibly: while the socket is missing, records
// go to stderr after one notice saying why; when it is back, one notice says
// so and records go to the journal again.
func TestJournalHandlerFallsBackVisibly(t *testing.T) {
	down := true
	var sentMsgs []string
	send := func(msg string, _ journal.Priority, _ map[string]string) error {
		if down {
			return &os.SyscallError{Syscall: "sendmsg", Err: syscall.ENOENT}
		}
		sentMsgs = append(sentMsgs, msg)
		return nil
	}
	var stderr bytes.Buffer
	log := slog.New(newJournalHandler(send, slog.NewTextHandler(&stderr, nil), slog.LevelInfo)).With("role", "director")
	log.Info("starting", "services", 2)
	log.Info("reconciled", "ops", 3)
	down = false
	log.Info("configuration reloaded")

	out := stderr.String()
	for _, want := range []string{
		`level=WARN msg="cannot write to the journal; logging to stderr until it is back" role=director err="sendmsg: no such file or directory"`,
		`msg=starting role=director services=2`,
		`msg=reconciled role=director ops=3`,
		`level=INFO msg="the journal is reachable again; logging there" role=director`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "cannot write to the journal"); n != 1 {
		t.Errorf("the notice appears %d times, want once:\n%s", n, out)
	}
	if len(sentMsgs) != 1 || sentMsgs[0] != "configuration reloaded" {
		t.Errorf("journal got %q after recovering", sentMsgs)
	}
}

// TestJournalHandlerRealSocketMissing uses go-systemd's real sender where
// the build machine has no journald: the record must reach stderr.
func TestJournalHandlerRealSocketMissing(t *testing.T) {
	if _, err := os.Stat("/run/systemd/journal/socket"); err == nil {
		t.Skip("a journald runs here; the fallback is covered with a fake socket")
	}
	var stderr bytes.Buffer
	log := slog.New(newJournalHandler(journal.Send, slog.NewTextHandler(&stderr, nil), slog.LevelInfo))
	log.Info("starting", "service", "web")
	out := stderr.String()
	if !strings.Contains(out, "cannot write to the journal") || !strings.Contains(out, "msg=starting service=web") {
		t.Errorf("stderr:\n%s", out)
	}
}
