-- +goose Up

-- The W3C trace context of the request that enqueued an entry: its
-- traceparent, then, when there is one, a space and its tracestate
-- (outbox.TraceContext.Encode). NULL for an entry enqueued without one,
-- which is every entry written before this migration and every entry of a
-- producer that does not trace. Enqueue validates it (printable ASCII,
-- bounded), so the column has no check. A dead letter keeps its entry's,
-- and a requeue passes it on to the new entry: the delivery of a replayed
-- entry still relates to the request that first wrote it.
--
-- Adding a nullable column without a default changes only the catalog, no
-- row is rewritten or read. Each statement still takes its table's ACCESS
-- EXCLUSIVE lock for that moment, so it waits for the transactions using
-- the table to end, and producers wait behind it: run it at a quiet time,
-- or under a lock_timeout and retry. IF NOT EXISTS lets a schema built
-- from the current shape, without recorded versions, take the file again.
ALTER TABLE baton_outbox ADD COLUMN IF NOT EXISTS trace_context text;
ALTER TABLE baton_outbox_dead ADD COLUMN IF NOT EXISTS trace_context text;
