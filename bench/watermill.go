package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/internal/benchkit"
)

// watermillPollInterval is the subscriber's pause when a query found no
// message. The default is 1s; the shortest the library accepts is the
// fastest for a relay that is ahead of its producers.
const watermillPollInterval = time.Millisecond

func watermillSettings() string {
	return fmt.Sprintf("watermill %s with watermill-sql %s: PostgreSQL subscriber with DefaultPostgreSQLSchema (xid8 transaction_id) "+
		"and DefaultPostgreSQLOffsetsAdapter, SubscribeBatchSize = the cell's batch, PollInterval %v (default 1s), "+
		"AckDeadline default (30s), a fresh consumer group per run, every message acked at once; "+
		"publisher on the producer's own pgx transaction (TxFromPgx), one message per transaction",
		watermillVersion, watermillSQLVersion, watermillPollInterval)
}

// watermillRelay is watermill-sql's side of the relay cells: its own
// messages table in the run's schema, loaded once with the same payloads.
type watermillRelay struct {
	pool  *pgxpool.Pool
	topic string
	runs  int
}

// newWatermillRelay creates the topic's tables and publishes n messages,
// 1000 per statement (not measured).
func newWatermillRelay(ctx context.Context, pool *pgxpool.Pool, topic string, n int) (*watermillRelay, error) {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	for left := n; left > 0; {
		k := min(left, 1000)
		msgs := make([]*message.Message, k)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), benchkit.Payload)
			msgs[i].SetContext(ctx)
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			return nil, fmt.Errorf("watermill publish: %w", err)
		}
		left -= k
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{"watermill_" + topic}.Sanitize()); err != nil {
		return nil, err
	}
	return &watermillRelay{pool: pool, topic: topic}, nil
}

// walk subscribes with a fresh consumer group, so it reads the topic from
// its start, and acks every message at once, until n or d.
func (w *watermillRelay) walk(batch, n int, d time.Duration) benchkit.System {
	return benchkit.System{Name: "watermill-sql subscriber", Run: func(ctx context.Context) (benchkit.Sample, error) {
		w.runs++
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(w.pool), wsql.SubscriberConfig{
			ConsumerGroup:    fmt.Sprintf("bench_%d_%d", batch, w.runs),
			PollInterval:     watermillPollInterval,
			SchemaAdapter:    wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch},
			OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true,
		}, watermill.NopLogger{})
		if err != nil {
			return benchkit.Sample{}, err
		}
		defer sub.Close()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := sub.SubscribeInitialize(w.topic); err != nil {
			return benchkit.Sample{}, err
		}
		start := time.Now()
		msgs, err := sub.Subscribe(sctx, w.topic)
		if err != nil {
			return benchkit.Sample{}, err
		}
		var got int64
		deadline := time.NewTimer(d)
		defer deadline.Stop()
		for got < int64(n) {
			select {
			case m, ok := <-msgs:
				if !ok {
					return benchkit.Sample{}, fmt.Errorf("watermill subscription closed after %d messages", got)
				}
				m.Ack()
				got++
				continue
			case <-deadline.C:
			}
			break
		}
		return benchkit.Sample{Ops: got, Elapsed: time.Since(start)}, nil
	}}
}

// watermillPublish is watermill-sql's producer: the business row, then a
// publisher on the same transaction publishes one message, and the
// transaction commits.
func watermillPublish(p *benchkit.Producers, topic string, producers int, d time.Duration) benchkit.System {
	return benchkit.System{Name: "watermill-sql publisher", Run: func(ctx context.Context) (benchkit.Sample, error) {
		return benchkit.Loop(ctx, producers, d, func(ctx context.Context) error {
			return p.Tx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, watermill.NopLogger{})
				if err != nil {
					return err
				}
				m := message.NewMessage(watermill.NewUUID(), benchkit.Payload)
				m.SetContext(ctx)
				return pub.Publish(topic, m)
			})
		})
	}}
}

// initWatermillTopic creates a topic's tables outside any producer
// transaction (a publisher on a transaction may not create them).
func initWatermillTopic(ctx context.Context, pool *pgxpool.Pool, topic string) error {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	m := message.NewMessage(watermill.NewUUID(), benchkit.Payload)
	m.SetContext(ctx)
	return pub.Publish(topic, m)
}
