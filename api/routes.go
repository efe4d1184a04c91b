package api

// The API's routes, as net/http ServeMux patterns ("METHOD /path/{param}").
// The daemon registers exactly these; the client builds its requests from
// the same paths, so no "/v1/..." string is spelled anywhere else.
const (
	RouteStatus      = "GET /v1/status"
	RouteLinks       = "GET /v1/links"
	RouteSetLink     = "PUT /v1/links/{name}"
	RoutePatchLink   = "PATCH /v1/links/{name}"
	RouteRemoveLink  = "DELETE /v1/links/{name}"
	RouteClasses     = "GET /v1/classes"
	RouteClass       = "GET /v1/classes/{name}"
	RouteAddClass    = "POST /v1/classes"
	RouteSetClass    = "PATCH /v1/classes/{name}"
	RouteRemoveClass = "DELETE /v1/classes/{name}"
	RouteRules       = "GET /v1/rules"
	RouteRule        = "GET /v1/rules/{name}"
	RouteAddRule     = "POST /v1/rules"
	RouteSetRule     = "PATCH /v1/rules/{name}"
	RouteRemoveRule  = "DELETE /v1/rules/{name}"
	RouteRuns        = "GET /v1/runs"
	RouteStartRun    = "POST /v1/runs"
	RouteEndRun      = "DELETE /v1/runs/{id}"
	RouteStats       = "GET /v1/stats/{kind}"
	RouteHistory     = "GET /v1/history/{kind}"
	RouteReload      = "POST /v1/reload"
	RouteDown        = "POST /v1/down"
	// RouteEvents streams events, one JSON object (Event) per line, for as
	// long as the client reads; ?since=SEQ resumes, ?kind=K[,K] filters.
	RouteEvents = "GET /v1/events"
	// Reservations.
	RouteReservations      = "GET /v1/reservations"
	RouteReservation       = "GET /v1/reservations/{name}"
	RouteAddReservation    = "POST /v1/reservations"
	RouteSetReservation    = "PATCH /v1/reservations/{name}"
	RouteRemoveReservation = "DELETE /v1/reservations/{name}"
	// RSVP signalling.
	RouteRSVP              = "GET /v1/rsvp"
	RouteRSVPSession       = "GET /v1/rsvp/sessions/{name}"
	RouteAddRSVPSession    = "POST /v1/rsvp/sessions"
	RouteRSVPSender        = "PUT /v1/rsvp/sessions/{name}/sender"
	RouteRSVPReserve       = "PUT /v1/rsvp/sessions/{name}/reservation"
	RouteRemoveRSVPSession = "DELETE /v1/rsvp/sessions/{name}"
	// RouteContainers lists the containers the daemon found (Container).
	RouteContainers = "GET /v1/containers"
)

// Routes returns every route of the API: the table the daemon's tests
// check against (each route registered, each fuzzed). A test of this
// package fails when a Route constant is missing from it.
func Routes() []string {
	return []string{
		RouteStatus,
		RouteLinks, RouteSetLink, RoutePatchLink, RouteRemoveLink,
		RouteClasses, RouteClass, RouteAddClass, RouteSetClass, RouteRemoveClass,
		RouteRules, RouteRule, RouteAddRule, RouteSetRule, RouteRemoveRule,
		RouteRuns, RouteStartRun, RouteEndRun,
		RouteStats, RouteHistory, RouteExplain, RouteReload, RouteDown, RouteEvents,
		RouteReservations, RouteReservation, RouteAddReservation, RouteSetReservation, RouteRemoveReservation,
		RouteRSVP, RouteRSVPSession, RouteAddRSVPSession, RouteRSVPSender, RouteRSVPReserve, RouteRemoveRSVPSession,
		RouteQSockInit, RouteQSockets, RouteQSockAttach, RouteQSockChange, RouteQSockInfo, RouteQSockDetach,
		RouteRTChannels, RouteRTChannel, RouteAdmitRTChannel, RouteCloseRTChannel,
		RouteBlocks, RouteAddBlock, RouteRemoveBlock, RouteProtected, RouteAddProtected, RouteRemoveProtected,
		RouteContainers, RouteWebToken,
	}
}
