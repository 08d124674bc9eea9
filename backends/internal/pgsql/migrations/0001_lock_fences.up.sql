-- +goose Up

-- Fencing tokens for PostgreSQL advisory locks. An advisory lock carries no
-- data, so every lock name gets a counter row here, and the statement that
-- takes the lock also increments token: each acquisition of a name therefore
-- sees a larger token than the one before, which a protected resource can use
-- to refuse writes from a holder that has since been replaced.
CREATE TABLE baton_lock_fences (
    name       text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    token      bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
