// Package console is baton's operator page: one server-rendered HTML
// handler, with no assets of its own to build or serve, that shows what an
// operator needs during an incident and lets them repair it.
//
//   - The outbox's health: whether this instance's driver leads, the last
//     pass, the failing streak and its last error with its time, and how
//     many entries wait after the walk's cursor and how many dead letters
//     wait for an operator.
//   - The dead letters, newest first, paged and filtered by lane and state
//     (waiting, requeued), and one of them with its payload.
//   - Requeueing one dead letter, or every waiting one of a lane, each
//     behind a confirmation page that says how many it will requeue (the
//     bulk one counts with a dry run of outbox.RequeueDead, and requeues no
//     more than it said).
//   - The role leases and partitions: holder, address, fencing token and
//     expiry, judged by the store's clock (lease.ListLeases).
//
// It reads and writes through core's own calls (outbox.ListDeadMatching,
// outbox.RequeueDead, lease.ListLeases) and serves outbox.AdminHandler, the
// JSON API, under api/outbox/, so the page and a script apply the same
// rules.
//
// # Forms and cross-site requests
//
// Every change is a POST from a confirmation page; a GET of a changing
// route is 405. Each confirmation page's form carries a token, an HMAC of
// the form's route and an expiry under Options.CSRFKey: nothing is stored,
// so any instance that shares the key accepts it. A POST without a valid,
// unexpired token for its route is refused with 403 and changes nothing.
// On top of that, http.CrossOriginProtection refuses POSTs that a browser
// marks as cross-origin. The JSON routes keep the admin handler's own
// protection: they refuse a browser's cross-origin requests and the
// bodies an HTML form can send, so a script sends JSON or no body.
//
// Pages forbid every script and framing (Content-Security-Policy), and
// every value shown, a payload or an error a processor returned included,
// is escaped by html/template.
//
// Mount it behind your own authentication; it has none:
//
//	h, err := console.NewHandler(console.Options{Outbox: outboxStore, Leases: leaseStore,
//		Driver: driver, CSRFKey: key, Prefix: "/ops"})
//	mux.Handle("/ops/", requireOperator(h))
package console
