// Package graph is baton's client side of an external graph authorization
// engine: the service that holds relations between subjects and resources
// and answers permission questions from them.
//
// # Publishing changes: the two standard lanes
//
// A service tells the engine about the entities it owns through the outbox
// (core/outbox), so that the engine learns of a change exactly when the
// producing transaction commits, and never otherwise:
//
//	LaneInit      "graph.init"      POST {DeliveryURL}/api/v3/graph/resources/init
//	LaneMetadata  "graph.metadata"  PUT  {DeliveryURL}/api/v3/graph/entities/{type}/{id}/metadata
//
// EnqueueInit and EnqueueMetadata validate and encode the payloads and hand
// them to any backend's enqueue function (an EnqueueFunc, usually a closure
// over the caller's transaction). StandardProcessors returns the two
// outbox.Processor values that deliver them.
//
// # How a response becomes an outcome
//
//	2xx                        Delivered
//	400, 409                   Park: the request can never succeed as it is
//	429, 503 with Retry-After  Retry, and the next pass waits that long (capped)
//	anything else, no answer   Retry: the walk stops here and tries again
//
// A payload that does not decode or validate is parked: no retry can fix
// it. Each run is delivered in order, one request at a time, and at the
// first retry the rest of the run is "not attempted" (also a retry), so
// nothing overtakes an entry that has not been delivered. Delivery is at
// least once; every request carries the entry id in IdempotencyKeyHeader
// so the engine can acknowledge a repeat without applying it twice, and
// the outbox leader's fencing token in FencingTokenHeader, so an engine can
// refuse a deposed leader (409 with the header naming a newer token); the
// processor then returns an error wrapping outbox.ErrFenced, and the
// deposed leader steps down without parking anything.
//
// # Asking questions
//
// AuthorizationClient, DefinitionsClient, RegistrationClient and
// GrantsClient are thin typed clients for the engine's other endpoints.
// Those paths are baton's own contract (docs/graph-engine-api.md), not the
// engine vendor's. Every client and processor takes the caller's
// *http.Client: credentials are attached there, with a RoundTripper, so
// each service reaches the engine as itself.
//
// Package graphtest is a fake engine for tests and demos.
package graph
