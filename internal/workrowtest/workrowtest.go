// Package workrowtest holds what the work-row tests that audit a real
// table share: the audited table's DDL and the stamps every finalize adds,
// so that the database itself records any finalize that changed a row its
// lock id no longer owned.
package workrowtest

import (
	"strings"

	"github.com/baton-go/baton/core/workrow"
)

// auditedDDL is the work table, its violations table and the audit
// trigger; {{table}} is replaced by the table's name. A finalize stamps the lock
// id it acts under into finalized_by (see Stamp); the trigger records every
// update whose stamp differs from the lock id on the row at that moment.
const auditedDDL = `CREATE TABLE {{table}} (
    id            bigint PRIMARY KEY,
    seq           bigint NOT NULL,
    attempts      integer NOT NULL DEFAULT 0,
    completed_at  timestamptz,
    parked_at     timestamptz,
    last_error    text,
    completions   integer NOT NULL DEFAULT 0,
    finalizes     integer NOT NULL DEFAULT 0,
    finalized_by  text,
    completed_by  text,
    lock_id       uuid,
    locked_until  timestamptz
) WITH (fillfactor = 90);
CREATE TABLE {{table}}_violations (id bigint, row_lock uuid, finalized_by text);
CREATE FUNCTION {{table}}_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.finalized_by IS DISTINCT FROM OLD.finalized_by
       AND (OLD.lock_id IS NULL OR OLD.lock_id::text <> NEW.finalized_by) THEN
        INSERT INTO {{table}}_violations VALUES (OLD.id, OLD.lock_id, NEW.finalized_by);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER {{table}}_audit BEFORE UPDATE ON {{table}} FOR EACH ROW EXECUTE FUNCTION {{table}}_audit()`

// AuditedTableDDL is the DDL of an audited work table named table (a plain
// lower-case identifier), with table_violations beside it.
func AuditedTableDDL(table string) string { return strings.ReplaceAll(auditedDDL, "{{table}}", table) }

// Live is the audited table's live-row filter.
var Live = workrow.And(workrow.IsNull("completed_at"), workrow.IsNull("parked_at"))

// Stamp returns finals with the audit's sets added: the finalize count, the
// lock id acting, and for a completion the lock id that completed it. It
// also says which finals complete their row.
func Stamp[K comparable](lock workrow.LockID, finals []workrow.Final[K]) (stamped []workrow.Final[K], completes []bool) {
	stamped = append([]workrow.Final[K](nil), finals...)
	completes = make([]bool, len(finals))
	for i, f := range finals {
		sets := append([]workrow.Set(nil), f.Set...)
		for _, set := range f.Set {
			completes[i] = completes[i] || set.Column() == "completed_at"
		}
		sets = append(sets, workrow.Add("finalizes", 1), workrow.Assign("finalized_by", lock.String()))
		if completes[i] {
			sets = append(sets, workrow.Assign("completed_by", lock.String()))
		}
		stamped[i].Set = sets
	}
	return stamped, completes
}
