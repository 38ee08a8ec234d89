package realserver

import (
	"net/http"

	"github.com/lvsd/lvsd/agent/api"
)

// API routes served on the local socket (agent/api) by a real server.
const (
	RouteDrain   = "/v1/drain"
	RouteUndrain = "/v1/undrain"
	RouteStatus  = "/v1/status"
)

// APIHandler serves the local API of a real server:
//
//	POST /v1/drain    announce weight 0 (persisted: survives restarts)
//	POST /v1/undrain  announce the configured weight again
//	GET  /v1/status   the Status, with the local checks run now
//	POST /v1/reload   read the agent file again and apply it (api.ReloadResult)
//
// drain and undrain answer with the new Status once it is recorded, and are
// idempotent.
func (a *Agent) APIHandler() http.Handler {
	mux := http.NewServeMux()
	drain := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := a.request(r.Context(), on); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			api.WriteJSON(w, a.status.Load())
		}
	}
	mux.HandleFunc("POST "+RouteDrain, drain(true))
	mux.HandleFunc("POST "+RouteUndrain, drain(false))
	mux.HandleFunc("POST "+api.RouteReload, api.ReloadHandler(a.requestReload))
	mux.HandleFunc("GET "+RouteStatus, func(w http.ResponseWriter, r *http.Request) {
		st := *a.status.Load()
		st.Checks = a.runChecks(r.Context(), st.checks)
		st.TOA = a.toaStatus(r.Context(), &st)
		api.WriteJSON(w, st)
	})
	return mux
}
