package graphtest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
)

// decode reads the (already buffered) JSON body into v, answering 400 when
// it does not decode.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the body does not decode: %v", err)
		return false
	}
	return true
}

// apply runs a lane request's effect, records the delivery and answers
// 204, unless its fencing token is below the highest seen (409, nothing
// changes) or its idempotency key already took effect (204, marked as a
// duplicate, nothing changes). The token is checked and raised in the same
// critical section as the effect, so a deposed leader's request can never
// take effect after a successor's. Called without e.mu.
func (e *Engine) apply(w http.ResponseWriter, r *http.Request, lane string, payload any, effect func()) {
	rec := requestInfo(r).rec
	key := rec.IdempotencyKey
	b, _ := json.Marshal(payload)
	id, _ := outbox.ParseID(key)

	e.mu.Lock()
	token := rec.FencingToken
	if token != 0 && token < e.highest {
		highest := e.highest
		e.mu.Unlock()
		w.Header().Set(graph.FencingTokenHeader, strconv.FormatUint(highest, 10))
		writeError(w, http.StatusConflict, "fencing token %d is below %d, which a newer leader sent: this sender was deposed", token, highest)
		return
	}
	e.highest = max(e.highest, token)
	if e.applied[key] {
		rec.Duplicate = true
		e.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	e.applied[key] = true
	effect()
	e.deliveries = append(e.deliveries, Delivery{
		Lane:           lane,
		Path:           r.URL.EscapedPath(),
		IdempotencyKey: key,
		EntryID:        id,
		FencingToken:   token,
		Payload:        b,
		At:             time.Now(),
	})
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// fencingToken reads a request's graph.FencingTokenHeader: 0 when it has
// none or one that is not a positive decimal (needKey refuses those).
func fencingToken(r *http.Request) uint64 {
	n, err := strconv.ParseUint(r.Header.Get(graph.FencingTokenHeader), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// needKey answers 400 for a lane request without an idempotency key: the
// engine could not tell a repeat from a new request.
func needKey(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get(graph.IdempotencyKeyHeader) == "" {
		writeError(w, http.StatusBadRequest, "the %s header is required", graph.IdempotencyKeyHeader)
		return false
	}
	if v, ok := r.Header[graph.FencingTokenHeader]; ok && fencingToken(r) == 0 {
		writeError(w, http.StatusBadRequest, "the %s header %q is not a positive decimal token", graph.FencingTokenHeader, v)
		return false
	}
	return true
}

func (e *Engine) handleInit(w http.ResponseWriter, r *http.Request) {
	if !needKey(w, r) {
		return
	}
	var p graph.InitPayload
	if !decode(w, r, &p) {
		return
	}
	if err := p.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	e.apply(w, r, graph.LaneInit, p, func() {
		e.resources[[2]string{p.ResourceType, p.ResourceID}] = p
	})
}

func (e *Engine) handleMetadata(w http.ResponseWriter, r *http.Request) {
	if !needKey(w, r) {
		return
	}
	var body struct {
		Label *string `json:"label"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Label == nil {
		writeError(w, http.StatusBadRequest, "the body has no label")
		return
	}
	p := graph.MetadataPayload{EntityType: r.PathValue("type"), EntityID: r.PathValue("id"), Label: *body.Label}
	if err := p.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	e.apply(w, r, graph.LaneMetadata, p, func() {
		e.labels[[2]string{p.EntityType, p.EntityID}] = p.Label
	})
}

func (e *Engine) handleAuthorize(w http.ResponseWriter, r *http.Request) {
	var q graph.PermissionCheck
	if !decode(w, r, &q) {
		return
	}
	if err := q.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	e.mu.Lock()
	defs := e.defs
	grants := e.grants[[2]string{q.SubjectType, q.SubjectID}]
	e.mu.Unlock()
	want, err := defs.Mask(q.ResourceType, q.Permission)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	allowed := false
	for _, g := range grants {
		if g.ResourceType == q.ResourceType && g.ResourceID == q.ResourceID && g.Allows(want) {
			allowed = true
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]bool{"allowed": allowed})
}

func (e *Engine) handleDefinitions(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	d := e.defs
	e.mu.Unlock()
	if d.EntityTypes == nil {
		d.EntityTypes = []graph.EntityType{}
	}
	writeJSON(w, http.StatusOK, d)
}

func (e *Engine) handleAuthorities(w http.ResponseWriter, r *http.Request) {
	var reg graph.Registration
	if !decode(w, r, &reg) {
		return
	}
	if err := reg.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if t, owner := e.register(reg); owner != "" {
		writeError(w, http.StatusConflict, "entity type %q is registered to service %q", t, owner)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// register claims reg's types for its service, all or none; on a conflict
// it returns the first type another service holds, and that service.
func (e *Engine) register(reg graph.Registration) (entityType, owner string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range reg.EntityTypes {
		if o, ok := e.authorities[t]; ok && o != reg.Service {
			return t, o
		}
	}
	for _, t := range reg.EntityTypes {
		e.authorities[t] = reg.Service
	}
	return "", ""
}

func (e *Engine) handleProjections(w http.ResponseWriter, r *http.Request) {
	st, sid := r.PathValue("subjectType"), r.PathValue("subjectId")
	e.mu.Lock()
	grants := append([]graph.Grant{}, e.grants[[2]string{st, sid}]...)
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, graph.Grants{SubjectType: st, SubjectID: sid, Grants: grants})
}
