-- +goose Up

-- Projections: a local copy of a permission engine's answers. A refresh of a
-- subject writes one complete generation: a header row and one detail row per
-- resource, carrying the 64-bit permission mask (stored as the bit pattern of
-- a signed bigint). The header row is inserted inactive, the detail rows are
-- copied in, and active moves from the previous generation to the new one, all
-- in one transaction: a reader sees the old generation or the new one, never
-- a part of either. At most one generation per subject is active
-- (baton_projection_header_active, which also answers point reads); the
-- others are superseded, and the sweep deletes them through
-- baton_projection_header_superseded, which is empty in the common case.
--
-- Both tables are UNLOGGED: they cache someone else's authoritative data and
-- are rewritten wholesale on every refresh, so skipping the WAL is most of
-- the point. The price: after a crash restart they are EMPTY (and standbys
-- never have them). An absent projection therefore means "refresh it", never
-- "no access". The generation sequence is an ordinary, logged one, so
-- generation numbers never repeat, crash or not.
--
-- Text columns compare bytewise (COLLATE "C"): the indexes need no locale
-- and Snapshot reads come back in byte order. The lengths are in bytes, as
-- the stores validate them.
CREATE SEQUENCE baton_projection_generation AS bigint;

CREATE UNLOGGED TABLE baton_projection_header (
    generation   bigint      PRIMARY KEY DEFAULT nextval('baton_projection_generation'),
    subject_type text        COLLATE "C" NOT NULL CHECK (octet_length(subject_type) BETWEEN 1 AND 128),
    subject_id   text        COLLATE "C" NOT NULL CHECK (octet_length(subject_id) BETWEEN 1 AND 256),
    active       boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
ALTER SEQUENCE baton_projection_generation OWNED BY baton_projection_header.generation;
CREATE UNIQUE INDEX baton_projection_header_active
    ON baton_projection_header (subject_type, subject_id) WHERE active;
CREATE INDEX baton_projection_header_superseded
    ON baton_projection_header (generation) WHERE NOT active;

CREATE UNLOGGED TABLE baton_projection_detail (
    generation    bigint NOT NULL,
    resource_type text   COLLATE "C" NOT NULL,
    resource_id   text   COLLATE "C" NOT NULL,
    mask          bigint NOT NULL,
    PRIMARY KEY (generation, resource_type, resource_id)
);
