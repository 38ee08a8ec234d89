package api

import (
	"context"
	"net/http"
	"time"
)

// RouteReload is the route of a reload request, on a director's and on a
// real server's control socket: POST reads the configuration again and
// applies it, as SIGHUP does, and answers once that is done.
const RouteReload = "/v1/reload"

// ReloadResult is the answer to a reload request. Error is empty when the
// configuration was read and applied; else it says what failed: the
// configuration was rejected (the last good one stays in force) or some
// changes could not be applied (they are retried).
type ReloadResult struct {
	// Rejected: the configuration did not load; nothing changed.
	Rejected bool   `json:"rejected,omitempty"`
	Error    string `json:"error,omitempty"`
	// Changed counts the services whose definition changed.
	Changed int `json:"changed"`
	// Restart names the changed keys that take effect only after a
	// restart (the rest of the reload was applied).
	Restart []string `json:"restart,omitempty"`
	// Changes is how many kernel changes the reload made.
	Changes int `json:"changes"`
	// Held: changed services are loaded but not in force yet, waiting
	// until every live director has them (cluster.coordinated_changes);
	// absent when nothing waits. The reload succeeded all the same.
	Held *ReloadHeld `json:"held,omitempty"`
}

// ReloadHeld is a change of services held until every live director has
// loaded it.
type ReloadHeld struct {
	// Services are the held services, sorted.
	Services []string `json:"services"`
	// WaitingFor are the live directors that do not advertise the change
	// yet, sorted; none: they have not been compared with it yet.
	WaitingFor []string `json:"waiting_for,omitempty"`
	// NotWaitedFor are the live directors that cannot be compared (an
	// earlier release).
	NotWaitedFor []string `json:"not_waited_for,omitempty"`
	// Since is when the change was loaded; Until when it goes in force at
	// the latest, even while some director lags.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
}

// ReloadHandler answers reload requests with reload's ReloadResult (its
// Rejected and Error say whether it failed), or 503 when the agent could
// not take the request. ReloadResult.Failed fills Error.
func ReloadHandler(reload func(context.Context) (ReloadResult, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res, err := reload(r.Context())
		if err != nil {
			http.Error(w, "reload: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		WriteJSON(w, res)
	}
}

// Failed sets r's Error from the reload's error: the configuration was
// rejected, or changes failed.
func (r *ReloadResult) Failed(err error) {
	switch {
	case err == nil:
	case r.Rejected:
		r.Error = "configuration rejected, the last good one stays in force: " + err.Error()
	default:
		r.Error = "some changes failed and are retried: " + err.Error()
	}
}
