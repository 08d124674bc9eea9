package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// errNotHolder is a cycle refused because this instance does not hold the
// role (any more).
var errNotHolder = errors.New("this instance does not hold the maintenance role")

// errFencedOut is a cycle whose write was refused because a later holder
// has written with a larger token: this instance was deposed mid-cycle.
var errFencedOut = errors.New("a later holder of the maintenance role has written; this cycle's result was discarded")

// maintain runs a maintenance cycle every interval, on the holder only.
// There is no "became holder" event: each cycle asks IsHeld, so a holder
// that loses the role (a stalled heartbeat, a lost database) stops by itself
// at its next cycle.
func (s *service) maintain(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if s.role.IsHeld() {
			stamp, err := s.maintenanceCycle(ctx)
			switch {
			case err == nil:
				s.log.Info("maintenance cycle", "profiles", stamp.Profiles, "token", stamp.Token)
			case ctx.Err() == nil && !errors.Is(err, errNotHolder):
				s.log.Warn("maintenance cycle failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maintenanceStamp is the last maintenance cycle's record.
type maintenanceStamp struct {
	Instance string    `json:"instance"`
	Token    uint64    `json:"token"`
	Profiles int64     `json:"profiles"`
	RanAt    time.Time `json:"ranAt"`
}

// maintenanceCycle counts the profiles and records the count with this
// term's fencing token. The write only lands while no later term has
// written, so a holder paused past its lease cannot overwrite its
// successor's record.
func (s *service) maintenanceCycle(ctx context.Context) (maintenanceStamp, error) {
	token := s.role.Token() // 0 when not held
	if token == 0 {
		return maintenanceStamp{}, errNotHolder
	}
	var stamp maintenanceStamp
	err := s.pool.QueryRow(ctx, `
		INSERT INTO profile_maintenance (id, instance, token, profiles, ran_at)
		SELECT 1, $1, $2, count(*), now() FROM profiles
		ON CONFLICT (id) DO UPDATE
		   SET instance = EXCLUDED.instance, token = EXCLUDED.token,
		       profiles = EXCLUDED.profiles, ran_at = EXCLUDED.ran_at
		 WHERE profile_maintenance.token <= EXCLUDED.token
		RETURNING instance, token, profiles, ran_at`,
		s.instanceID, int64(token)).Scan(&stamp.Instance, &stamp.Token, &stamp.Profiles, &stamp.RanAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return maintenanceStamp{}, errFencedOut
	}
	if err != nil {
		return maintenanceStamp{}, err
	}
	s.cycles.Add(1)
	return stamp, nil
}

// maintenanceReport is what /maintenance answers, on the holder: who served
// it, and the last cycle's record.
type maintenanceReport struct {
	// ServedBy is the instance that ran this handler: the holder, whichever
	// instance the client called.
	ServedBy string `json:"servedBy"`
	Token    uint64 `json:"token"`
	// Last is the last recorded cycle; null before the first.
	Last *maintenanceStamp `json:"last"`
}

// serveMaintenance answers GET /maintenance.
func (s *service) serveMaintenance(w http.ResponseWriter, r *http.Request) {
	rep := maintenanceReport{ServedBy: s.instanceID, Token: s.role.Token()}
	var last maintenanceStamp
	err := s.pool.QueryRow(r.Context(),
		`SELECT instance, token, profiles, ran_at FROM profile_maintenance WHERE id = 1`).
		Scan(&last.Instance, &last.Token, &last.Profiles, &last.RanAt)
	switch {
	case err == nil:
		rep.Last = &last
	case !errors.Is(err, pgx.ErrNoRows):
		s.fail(w, "read the maintenance record", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// runMaintenance answers POST /maintenance/run: a cycle now, on the holder.
func (s *service) runMaintenance(w http.ResponseWriter, r *http.Request) {
	stamp, err := s.maintenanceCycle(r.Context())
	switch {
	case errors.Is(err, errNotHolder), errors.Is(err, errFencedOut):
		// Lost the role between the proxy's check and here: the client may
		// retry and reach the new holder.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		s.fail(w, "maintenance cycle", err)
	default:
		writeJSON(w, http.StatusOK, maintenanceReport{ServedBy: s.instanceID, Token: stamp.Token, Last: &stamp})
	}
}
