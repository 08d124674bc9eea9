-- The statements bunstore.CreateSchema sent to an empty schema while bun built
-- baton's tables from its models, before both adapters ran the migration
-- files: a schema made this way has every table but no baton_schema_migrations
-- rows. The adoption tests replay them.
CREATE TABLE "baton_lock_fences" ("name" text NOT NULL, "token" bigint NOT NULL DEFAULT 0, "updated_at" timestamptz NOT NULL DEFAULT now(), CONSTRAINT "baton_lock_fences_name_check" CHECK (length(name) BETWEEN 1 AND 128), PRIMARY KEY ("name"));
CREATE TABLE "baton_role_leases" ("role" text NOT NULL, "holder" text NOT NULL, "holder_address" text NOT NULL DEFAULT '', "token" bigint NOT NULL, "acquired_at" timestamptz NOT NULL, "renewed_at" timestamptz NOT NULL, "expires_at" timestamptz NOT NULL, CONSTRAINT "baton_role_leases_role_check" CHECK (octet_length(role) BETWEEN 1 AND 128), PRIMARY KEY ("role"));
CREATE TABLE "baton_outbox" ("xid" xid8 NOT NULL DEFAULT pg_current_xact_id(), "id" uuid NOT NULL, "lane" text NOT NULL, "payload" jsonb NOT NULL, "created_at" timestamptz NOT NULL DEFAULT now(), CONSTRAINT "baton_outbox_lane_check" CHECK (octet_length(lane) BETWEEN 1 AND 128), PRIMARY KEY ("id"));
CREATE INDEX IF NOT EXISTS "baton_outbox_walk" ON "baton_outbox" ("xid", "id");
CREATE TABLE "baton_outbox_state" ("key" text NOT NULL, "value" text, PRIMARY KEY ("key"));
CREATE TABLE "baton_outbox_dead" ("id" uuid NOT NULL, "xid" xid8 NOT NULL, "lane" text NOT NULL, "payload" jsonb NOT NULL, "error" text NOT NULL, "parked_at" timestamptz NOT NULL DEFAULT now(), "requeued_as" uuid, "requeued_at" timestamptz, CONSTRAINT "baton_outbox_dead_check" CHECK ((requeued_as IS NULL) = (requeued_at IS NULL)), PRIMARY KEY ("id"));
CREATE INDEX IF NOT EXISTS "baton_outbox_dead_parked" ON "baton_outbox_dead" ("parked_at" DESC, "id");
CREATE INDEX IF NOT EXISTS "baton_outbox_dead_requeued" ON "baton_outbox_dead" ("requeued_at") WHERE (requeued_as IS NOT NULL);
CREATE SEQUENCE IF NOT EXISTS "baton_projection_generation" AS bigint;
CREATE TABLE "baton_projection_header" ("generation" bigint NOT NULL DEFAULT nextval('baton_projection_generation'), "subject_type" text NOT NULL, "subject_id" text NOT NULL, "active" boolean NOT NULL DEFAULT false, "created_at" timestamptz NOT NULL DEFAULT now(), CONSTRAINT "baton_projection_header_subject_type_check" CHECK (octet_length(subject_type) BETWEEN 1 AND 128), CONSTRAINT "baton_projection_header_subject_id_check" CHECK (octet_length(subject_id) BETWEEN 1 AND 256), PRIMARY KEY ("generation"));
ALTER TABLE "baton_projection_header" ALTER COLUMN "subject_type" TYPE text COLLATE "C";
ALTER TABLE "baton_projection_header" ALTER COLUMN "subject_id" TYPE text COLLATE "C";
ALTER TABLE "baton_projection_header" SET UNLOGGED;
ALTER SEQUENCE "baton_projection_generation" OWNED BY "baton_projection_header"."generation";
CREATE UNIQUE INDEX IF NOT EXISTS "baton_projection_header_active" ON "baton_projection_header" ("subject_type", "subject_id") WHERE (active);
CREATE INDEX IF NOT EXISTS "baton_projection_header_superseded" ON "baton_projection_header" ("generation") WHERE (NOT active);
CREATE TABLE "baton_projection_detail" ("generation" bigint NOT NULL, "resource_type" text NOT NULL, "resource_id" text NOT NULL, "mask" bigint NOT NULL, PRIMARY KEY ("generation", "resource_type", "resource_id"));
ALTER TABLE "baton_projection_detail" ALTER COLUMN "resource_type" TYPE text COLLATE "C";
ALTER TABLE "baton_projection_detail" ALTER COLUMN "resource_id" TYPE text COLLATE "C";
ALTER TABLE "baton_projection_detail" SET UNLOGGED;
