-- +goose Up

-- Role leases: one row per role, naming the instance that holds it until
-- expires_at. Expiry is always judged by the database clock (now()), so the
-- application clocks of the competing instances never need to agree. token
-- grows by one at every takeover and is never reset (a release only moves
-- expires_at back to now()), so a term can be fenced by its token and a
-- deposed holder can never renew or release its successor's term. The role
-- limit is in bytes, as the stores validate it.
CREATE TABLE baton_role_leases (
    role           text        PRIMARY KEY CHECK (octet_length(role) BETWEEN 1 AND 128),
    holder         text        NOT NULL,
    holder_address text        NOT NULL DEFAULT '',
    token          bigint      NOT NULL,
    acquired_at    timestamptz NOT NULL,
    renewed_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL
);
