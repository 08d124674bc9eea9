-- +goose Up

-- The transactional outbox. A producer inserts into baton_outbox inside its
-- own transaction (pgxstore.Enqueue), so an entry exists exactly when the
-- producer's change commits. xid is the producing transaction's 64-bit id,
-- taken from the column default: PostgreSQL assigns it at the transaction's
-- first write, so (xid, id) is xid-assignment order, not commit order. The
-- walk reads (xid, id) > cursor below the oldest transaction still running,
-- ORDER BY xid, id LIMIT n, and retention deletes (xid, id) <= cursor in the
-- same order: both ride baton_outbox_walk. There is no default for id: the
-- producer supplies it (a UUIDv7), and it is the idempotency key downstream.
-- The lane limit is in bytes, as Enqueue validates it.
CREATE TABLE baton_outbox (
    xid        xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id         uuid        PRIMARY KEY,
    lane       text        NOT NULL CHECK (octet_length(lane) BETWEEN 1 AND 128),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX baton_outbox_walk ON baton_outbox (xid, id);

-- Everything the outbox knows about itself, one fact per key (the cursor as
-- last_scanned_xid and last_scanned_id, health stamps, ...). An absent key
-- reads as its default and every write is an upsert, so a new fact needs no
-- migration.
CREATE TABLE baton_outbox_state (
    key   text PRIMARY KEY,
    value text
);

-- Parked entries: moved here, with the reason, by the settlement of the pass
-- that parked them. A requeue inserts a new entry with a fresh id and records
-- it in requeued_as and the time in requeued_at; only requeued ones are ever
-- deleted by retention, a window after their requeue
-- (baton_outbox_dead_requeued), the others wait for an operator. Listings go
-- newest parked first and, parked together, by id; baton_outbox_dead_parked
-- holds that order, so a page is one forward index scan.
CREATE TABLE baton_outbox_dead (
    id          uuid        PRIMARY KEY,
    xid         xid8        NOT NULL,
    lane        text        NOT NULL,
    payload     jsonb       NOT NULL,
    error       text        NOT NULL,
    parked_at   timestamptz NOT NULL DEFAULT now(),
    requeued_as uuid,
    requeued_at timestamptz,
    CHECK ((requeued_as IS NULL) = (requeued_at IS NULL))
);
CREATE INDEX baton_outbox_dead_parked ON baton_outbox_dead (parked_at DESC, id);
CREATE INDEX baton_outbox_dead_requeued ON baton_outbox_dead (requeued_at) WHERE requeued_as IS NOT NULL;
