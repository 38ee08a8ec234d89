package connsync

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"
)

// Stats are the relay's counters since it was created, for metrics and
// logs. Counters only grow.
type Stats struct {
	MasterDatagrams uint64 `json:"master_datagrams"` // datagrams read from the local master daemon
	MasterRecords   uint64 `json:"master_records"`   // records in them
	Pushes          uint64 `json:"pushes"`           // datagrams sent to the pusher service

	SentMessages    uint64 `json:"sent_messages"`    // relay messages with records handed to the transport; a broadcast counts once
	SentRecords     uint64 `json:"sent_records"`     // records in them
	ReplayedRecords uint64 `json:"replayed_records"` // of SentRecords, those replayed from the cache

	ReceivedMessages uint64 `json:"received_messages"` // valid relay messages from peers
	ReceivedRecords  uint64 `json:"received_records"`  // records in them
	AppliedDatagrams uint64 `json:"applied_datagrams"` // datagrams written to the local backup daemon while it runs
	AppliedRecords   uint64 `json:"applied_records"`   // records in them; the kernel may still drop some (ConfirmedRecords)
	HeldMessages     uint64 `json:"held_messages"`     // relay messages held because the backup daemon did not run yet

	// The records of the replays a starting director receives, checked
	// against the kernel's IPVS connection table (confirm.go).
	ConfirmedRecords   uint64 `json:"confirmed_records"`   // found in the table
	RetriedRecords     uint64 `json:"retried_records"`     // written again because the table lacked them
	UnconfirmedRecords uint64 `json:"unconfirmed_records"` // still not found after the retries, or never checked

	DroppedInvalid  uint64 `json:"dropped_invalid"`  // datagrams and relay messages that failed validation, whole
	DroppedStale    uint64 `json:"dropped_stale"`    // records whose timeout ran out in transit (by the sender's clock)
	DroppedOverflow uint64 `json:"dropped_overflow"` // relay messages dropped because the relay was behind
	DroppedWrite    uint64 `json:"dropped_write"`    // datagrams the backup socket refused
	// DroppedBackupDown are relay messages that did not fit the hold while
	// the backup daemon did not run; their senders are asked again.
	DroppedBackupDown uint64 `json:"dropped_backup_down"`

	// Relay messages refused as not fresh (a replay, or a clock out of
	// bounds), whole.
	DroppedReplayed uint64 `json:"dropped_replayed"` // seen already, from an earlier incarnation of the sender, or this director's own
	DroppedTooOld   uint64 `json:"dropped_too_old"`  // sent more than MaxAge ago by this director's clock
	DroppedFuture   uint64 `json:"dropped_future"`   // sent more than MaxClockSkew in the future, or of an incarnation a day ahead
	// DroppedUnproven: relay messages refused, whole, because they are not
	// signed by a key cluster.directors lists under the sender they name.
	DroppedUnproven uint64 `json:"dropped_unproven"`
	// Records refused as not authorised.
	DroppedUnconfigured uint64 `json:"dropped_unconfigured"` // service or real server not configured here
	DroppedNotHolder    uint64 `json:"dropped_not_holder"`   // the sender does not hold the VIP in this director's view

	// Anti-entropy (antientropy.go).
	SummariesSent     uint64 `json:"summaries_sent"`     // summaries broadcast (a broadcast counts once)
	SummariesReceived uint64 `json:"summaries_received"` // valid summaries from peers
	MissingMessages   uint64 `json:"missing_messages"`   // peers' fresh broadcasts found lost and asked for by number
	RequestsSent      uint64 `json:"requests_sent"`      // requests for lost messages sent to peers
	RequestsReceived  uint64 `json:"requests_received"`  // valid requests from peers
	RequestsRefused   uint64 `json:"requests_refused"`   // of those, refused: not a member, too frequent, or naming messages not sent
	ResentRecords     uint64 `json:"resent_records"`     // of ReplayedRecords, those sent again to a peer that lost them
	FallbackReplays   uint64 `json:"fallback_replays"`   // whole-cache replays to one peer that lost more than could be sent again

	Evicted uint64 `json:"evicted"` // cache entries dropped to make room
	Expired uint64 `json:"expired"` // cache entries removed after their timeout

	CacheSize int `json:"cache_size"` // entries, including expired ones not yet removed

	// LastLag and MaxLag are receive time minus the sender's send time of
	// relay messages, so they include the clock offset between directors.
	// JSON has them as numbers of seconds (MarshalJSON).
	LastLag time.Duration `json:"-"`
	MaxLag  time.Duration `json:"-"`
}

// statsJSON is Stats as JSON: durations in seconds, as everywhere in
// lvsd's JSON (api.SchemaVersion).
type statsJSON struct {
	plainStats
	LastLag float64 `json:"last_lag_seconds"`
	MaxLag  float64 `json:"max_lag_seconds"`
}

type plainStats Stats // without the methods: no recursion

// MarshalJSON writes s with its lags in seconds.
func (s Stats) MarshalJSON() ([]byte, error) {
	return json.Marshal(statsJSON{plainStats(s), s.LastLag.Seconds(), s.MaxLag.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Stats) UnmarshalJSON(b []byte) error {
	var j statsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Stats(j.plainStats)
	s.LastLag = time.Duration(j.LastLag * float64(time.Second))
	s.MaxLag = time.Duration(j.MaxLag * float64(time.Second))
	return nil
}

// counters is Stats kept with atomics: Run updates it, Deliver and Stats
// run on other goroutines.
type counters struct {
	masterDatagrams, masterRecords, pushes        atomic.Uint64
	sentMessages, sentRecords, replayedRecords    atomic.Uint64
	receivedMessages, receivedRecords             atomic.Uint64
	appliedDatagrams, appliedRecords              atomic.Uint64
	droppedInvalid, droppedStale, droppedOverflow atomic.Uint64
	droppedWrite, evicted, expired                atomic.Uint64
	droppedReplayed, droppedTooOld, droppedFuture atomic.Uint64
	droppedUnconfigured, droppedNotHolder         atomic.Uint64
	droppedUnproven                               atomic.Uint64
	cacheSize, lastLag, maxLag                    atomic.Int64
	receivedFresh                                 atomic.Uint64 // records received in messages that are not replays
	summariesSent, summariesReceived              atomic.Uint64
	missingMessages, requestsSent                 atomic.Uint64
	requestsReceived, requestsRefused             atomic.Uint64
	resentRecords, fallbackReplays                atomic.Uint64
	heldMessages, droppedBackupDown               atomic.Uint64
	confirmedRecords, retriedRecords              atomic.Uint64
	unconfirmedRecords                            atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		MasterDatagrams:     c.masterDatagrams.Load(),
		MasterRecords:       c.masterRecords.Load(),
		Pushes:              c.pushes.Load(),
		SentMessages:        c.sentMessages.Load(),
		SentRecords:         c.sentRecords.Load(),
		ReplayedRecords:     c.replayedRecords.Load(),
		ReceivedMessages:    c.receivedMessages.Load(),
		ReceivedRecords:     c.receivedRecords.Load(),
		AppliedDatagrams:    c.appliedDatagrams.Load(),
		AppliedRecords:      c.appliedRecords.Load(),
		HeldMessages:        c.heldMessages.Load(),
		ConfirmedRecords:    c.confirmedRecords.Load(),
		RetriedRecords:      c.retriedRecords.Load(),
		UnconfirmedRecords:  c.unconfirmedRecords.Load(),
		DroppedBackupDown:   c.droppedBackupDown.Load(),
		DroppedInvalid:      c.droppedInvalid.Load(),
		DroppedStale:        c.droppedStale.Load(),
		DroppedOverflow:     c.droppedOverflow.Load(),
		DroppedWrite:        c.droppedWrite.Load(),
		DroppedReplayed:     c.droppedReplayed.Load(),
		DroppedTooOld:       c.droppedTooOld.Load(),
		DroppedFuture:       c.droppedFuture.Load(),
		DroppedUnproven:     c.droppedUnproven.Load(),
		DroppedUnconfigured: c.droppedUnconfigured.Load(),
		DroppedNotHolder:    c.droppedNotHolder.Load(),
		SummariesSent:       c.summariesSent.Load(),
		SummariesReceived:   c.summariesReceived.Load(),
		MissingMessages:     c.missingMessages.Load(),
		RequestsSent:        c.requestsSent.Load(),
		RequestsReceived:    c.requestsReceived.Load(),
		RequestsRefused:     c.requestsRefused.Load(),
		ResentRecords:       c.resentRecords.Load(),
		FallbackReplays:     c.fallbackReplays.Load(),
		Evicted:             c.evicted.Load(),
		Expired:             c.expired.Load(),
		CacheSize:           int(c.cacheSize.Load()),
		LastLag:             time.Duration(c.lastLag.Load()),
		MaxLag:              time.Duration(c.maxLag.Load()),
	}
}

func (c *counters) observeLag(d time.Duration) {
	c.lastLag.Store(int64(d))
	for {
		m := c.maxLag.Load()
		if int64(d) <= m || c.maxLag.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// summary is what the periodic log line compares: it is written only when
// the relay did something besides its routine replays, so an idle cluster
// stays quiet.
type summary struct {
	master, fresh, drops uint64
	cache                int
}

func (c *counters) summary() summary {
	s := c.snapshot()
	return summary{
		master: s.MasterRecords,
		fresh:  c.receivedFresh.Load(),
		drops: s.DroppedInvalid + s.DroppedStale + s.DroppedOverflow + s.DroppedWrite + s.DroppedBackupDown + s.Evicted +
			s.DroppedReplayed + s.DroppedTooOld + s.DroppedFuture + s.DroppedUnconfigured + s.DroppedNotHolder +
			s.RequestsRefused,
		cache: s.CacheSize,
	}
}

// logSummary logs the counters' change since prev, at Warn if anything was
// dropped. It logs nothing if nothing but replays happened.
func logSummary(log *slog.Logger, prevSum summary, prev, cur Stats, curSum summary) {
	if curSum == prevSum {
		return
	}
	level := slog.LevelInfo
	if curSum.drops != prevSum.drops {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "connection sync summary",
		"master_records", cur.MasterRecords-prev.MasterRecords,
		"pushes", cur.Pushes-prev.Pushes,
		"sent_messages", cur.SentMessages-prev.SentMessages,
		"sent_records", cur.SentRecords-prev.SentRecords,
		"replayed_records", cur.ReplayedRecords-prev.ReplayedRecords,
		"received_records", cur.ReceivedRecords-prev.ReceivedRecords,
		"applied_records", cur.AppliedRecords-prev.AppliedRecords,
		"confirmed_records", cur.ConfirmedRecords-prev.ConfirmedRecords,
		"retried_records", cur.RetriedRecords-prev.RetriedRecords,
		"unconfirmed_records", cur.UnconfirmedRecords-prev.UnconfirmedRecords,
		"held_messages", cur.HeldMessages-prev.HeldMessages,
		"dropped_backup_down", cur.DroppedBackupDown-prev.DroppedBackupDown,
		"dropped_invalid", cur.DroppedInvalid-prev.DroppedInvalid,
		"dropped_stale", cur.DroppedStale-prev.DroppedStale,
		"dropped_overflow", cur.DroppedOverflow-prev.DroppedOverflow,
		"dropped_write", cur.DroppedWrite-prev.DroppedWrite,
		"dropped_replayed", cur.DroppedReplayed-prev.DroppedReplayed,
		"dropped_too_old", cur.DroppedTooOld-prev.DroppedTooOld,
		"dropped_future", cur.DroppedFuture-prev.DroppedFuture,
		"dropped_unconfigured", cur.DroppedUnconfigured-prev.DroppedUnconfigured,
		"dropped_not_holder", cur.DroppedNotHolder-prev.DroppedNotHolder,
		"missing_messages", cur.MissingMessages-prev.MissingMessages,
		"resent_records", cur.ResentRecords-prev.ResentRecords,
		"fallback_replays", cur.FallbackReplays-prev.FallbackReplays,
		"requests_refused", cur.RequestsRefused-prev.RequestsRefused,
		"evicted", cur.Evicted-prev.Evicted,
		"expired", cur.Expired-prev.Expired,
		"cache_size", cur.CacheSize,
		"lag", cur.LastLag,
		"max_lag", cur.MaxLag,
	)
}
