package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"

	"github.com/shop-example/shop/internal/platform/keyscheme"
)

// Record is one request's idempotency key on a route under Atomic: the
// flow claims it and completes it inside its own transaction(s). A nil
// *Record (a route without layer 0, or a service called directly) does
// nothing: every method returns at once, so flows call them
// unconditionally.
//
// A Record belongs to one request and is used by one goroutine.
type Record struct {
	store     *Store
	flow      string
	principal string
	key       string          // the client's Idempotency-Key
	names     keyscheme.Names // the names the record may have
	fp        []byte
	owner     uuid.UUID // written by Claim; fences Complete and the release
	at        time.Time // when the request arrived: the claim's created_at

	claimed   bool      // a Claim of this request succeeded (its transaction may have rolled back since)
	name      string    // the record's name, once claimed: names.Write, or names.Other if the key had it
	crossed   bool      // the request met a record of the other scheme, and was counted for it
	firstSeen time.Time // when the key was first submitted, once claimed
	answer    *response // what Complete stored, once it reported so
	// What the request's idempotency span says, set on it in one call
	// when it ends (spans): what the claim met, whether the completion
	// stored the answer, what became of it.
	outcome, result string
	completeRan     bool // a completion ran (stored, or found the key taken)
}

// recordKey is the context key of the request's *Record.
type recordKey struct{}

// RecordFrom returns the request's record; nil when the route runs without
// layer 0 (layer tests) or the service is called directly. Every method of
// a nil *Record is a no-op that returns nil, so flows call them
// unconditionally.
func RecordFrom(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// Answer is what the flow answers on success, stored with the record.
type Answer struct {
	Status   int    // e.g. http.StatusCreated
	Location string // the Location header, or ""
	ETag     string // the ETag header, or ""
	Body     any    // marshalled as JSON exactly as httpx.JSON sends it
}

// encode renders a as the response that is stored and sent: the bytes of
// httpx.JSON, and the headers that are part of the answer (keptHeaders).
func (a Answer) encode() (*response, error) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a.Body); err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	if body.Len() > maxStoredBody {
		return nil, fmt.Errorf("encode answer: %d bytes, more than the %d stored", body.Len(), maxStoredBody)
	}
	headers := map[string]string{echo.HeaderContentType: echo.MIMEApplicationJSON}
	if a.Location != "" {
		headers[echo.HeaderLocation] = a.Location
	}
	if a.ETag != "" {
		headers["ETag"] = a.ETag
	}
	return &response{status: a.Status, headers: headers, body: body.Bytes()}, nil
}

// Send answers the request with a. When the request's record stored an
// answer in the flow's committed transaction, Send writes exactly those
// bytes, so that the first answer and every replay of it are the same;
// otherwise (no layer 0, or the key was taken over in a two-phase flow) it
// renders a the same way.
func Send(c echo.Context, a Answer) error {
	r := RecordFrom(c.Request().Context())
	if r == nil || r.answer == nil {
		resp, err := a.encode()
		if err != nil {
			return err
		}
		return write(c, resp)
	}
	return write(c, r.answer)
}

// write sends a response as it was stored.
func write(c echo.Context, r *response) error {
	h := c.Response().Header()
	for k, v := range r.headers {
		h.Set(k, v)
	}
	c.Response().WriteHeader(r.status)
	if _, err := c.Response().Write(r.body); err != nil {
		return fmt.Errorf("write answer: %w", err)
	}
	return nil
}

// Refusal is Claim's answer when the key is not this request's: another
// request of the key is running, or the key was completed (its answer is
// replayed), or it was used for a different request. The flow rolls back
// and returns it unchanged (or wrapped with %w); the Atomic middleware
// answers it.
type Refusal struct {
	prev *stored // the row that refused the claim; nil when another request holds the key's lock
}

func (e *Refusal) Error() string {
	switch {
	case e.prev == nil:
		return "idempotency key: another request with it is running"
	case e.prev.response != nil:
		return "idempotency key: completed; the stored answer is replayed"
	default:
		return "idempotency key: claimed by another request"
	}
}

const (
	// sqlClaimInTx claims the key inside the flow's transaction, in one
	// statement. First pg_try_advisory_xact_lock on (principal, key), in
	// the two-int form, so that it never meets the single-bigint locks
	// of the seats flow: a concurrent request of the key holds it until
	// its transaction ends, and this one is refused at once instead of
	// waiting inside PostgreSQL on the unique index with a pool
	// connection held. The lock is on the client's key under every key
	// scheme, so replicas on schemes 1 and 2 exclude each other.
	//
	// With the lock, the record's name (recordName): the one the key
	// already has, this replica's ($7) or the other scheme's ($8) (a
	// scheme-2 replica honours a scheme-1 record, package keyscheme),
	// else this replica's. Then the insert of
	// the claim under that name; or, when it exists, the takeover of a
	// claim whose lease ran out (only for the same fingerprint, and never
	// of a completed key), or of this request's own claim from an earlier
	// transaction (a two-phase flow). Otherwise the row is written back
	// unchanged, so that RETURNING hands back the row as it is now,
	// whatever snapshot the statement began with; the flow rolls back, so
	// nothing of it stays.
	//
	// The name is read in the statement's snapshot, which a claim of the
	// key under the other name could have missed if it committed just
	// before the lock was taken: where there is another name to look for,
	// the lock is taken first, alone (sqlKeyLock), so the snapshot is
	// taken under it.
	sqlClaimInTx = `
WITH lock AS (
	SELECT ` + claimLock + ` AS held
), name AS (
	SELECT ` + recordName + ` AS key FROM lock WHERE lock.held
), claim AS (
	INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, created_at, scheme)
	SELECT $1, name.key, $3, $4, $5, $6, $9 FROM name
	ON CONFLICT (principal, key) DO UPDATE
	   SET owner = CASE WHEN ` + takeable + ` THEN EXCLUDED.owner ELSE idempotency_keys.owner END,
	       locked_until = CASE WHEN ` + takeable + ` THEN EXCLUDED.locked_until ELSE idempotency_keys.locked_until END
	RETURNING key, owner, fingerprint, created_at, status_code, headers, body, scheme
)
SELECT lock.held, claim.key, coalesce(claim.owner = $4, false), claim.fingerprint, claim.created_at,
       claim.status_code, claim.headers, claim.body, claim.scheme
  FROM lock LEFT JOIN claim ON true`

	claimLock = `pg_try_advisory_xact_lock(hashtext($1), hashtext($2))`

	// recordName is the name the key has: the name of its record under
	// $7 (this replica's) or $8 (the other scheme's), else $7. Should
	// both exist, every replica, on either scheme, takes the scheme-1
	// one (firstName), so all of them answer from the same record.
	recordName = `coalesce((SELECT key FROM idempotency_keys WHERE principal = $1 AND key IN ($7, $8)
	                        ORDER BY ` + firstName + ` LIMIT 1), $7)`

	// firstName orders a key's names the scheme-1 one first.
	firstName = `key LIKE 'v2·%'`

	// sqlKeyLock takes the key's try-lock alone, ahead of the statement
	// that reads the key under it.
	sqlKeyLock = `SELECT ` + claimLock

	// sqlKeyWaitLock is sqlKeyLock for the owner of a claim, which waits
	// for the key's lock (sqlStoreOwnAnswer says why).
	sqlKeyWaitLock = `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)) IS NOT NULL`

	// sqlReclaimInTx and sqlReclaimedRow claim the key again in a later
	// transaction of the request that claimed it (a payment's second
	// phase, or a try after its first rolled back): two statements, sent
	// together, that write nothing while the claim is there. The first
	// waits for the key's lock, as sqlCompleteInTx does: the one who can
	// hold it meanwhile is a copy of the request being refused, or a
	// request taking the key over, each a short transaction, and a
	// try-lock here would give the key's owner up to its own copies (a
	// settle told "another request with it is running" by a double click,
	// its outcome then left to the reconciler). With the lock, it inserts
	// the claim only if the row is gone (the earlier transaction rolled
	// back); a claim that exists is left as it is. The second reads the row under the lock,
	// with a snapshot taken after the first statement, so it sees a
	// takeover that committed before the lock was taken: the key is still
	// this request's, or it was taken over after its lease ran out (or, its
	// claim rolled back, claimed by another request, under either name),
	// and the stale phase is refused before it acts on anything.
	sqlReclaimInTx = `
WITH lock AS (
	SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)) IS NOT NULL AS held
), name AS (
	SELECT ` + recordName + ` AS key FROM lock WHERE lock.held
), claim AS (
	INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, created_at, scheme)
	SELECT $1, name.key, $3, $4, $5, $6, $9 FROM name
	ON CONFLICT (principal, key) DO NOTHING
)
SELECT held FROM lock`

	// sqlReclaimedRow reads the key's row under either name, in the order
	// recordName takes them.
	sqlReclaimedRow = `
SELECT key, owner = $2, fingerprint, created_at, status_code, headers, body, scheme
  FROM idempotency_keys WHERE principal = $1 AND key IN ($3, $4)
 ORDER BY ` + firstName + ` LIMIT 1`

	takeable = `(idempotency_keys.status_code IS NULL
	     AND idempotency_keys.fingerprint = EXCLUDED.fingerprint
	     AND (idempotency_keys.locked_until < EXCLUDED.created_at OR idempotency_keys.owner = EXCLUDED.owner))`

	// sqlCompleteInTx stores the answer in the flow's transaction, fenced
	// by the owner token: a request whose key was taken over after its
	// lease ran out matches no row. It holds the key's advisory lock to
	// the end of the transaction (already, in the transaction that
	// claimed; waiting for it in a later phase, behind a copy being
	// refused or a request taking the key over, each a short transaction),
	// so a copy arriving now is refused at once instead of waiting for
	// this row. $3 is the record's name, as the claim found it.
	sqlCompleteInTx = `
WITH lock AS (
	SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))
)
UPDATE idempotency_keys
   SET status_code = $5, headers = $6, body = $7, completed_at = $8
 WHERE principal = $1 AND key = $3 AND owner = $4 AND status_code IS NULL
   AND EXISTS (SELECT 1 FROM lock)`

	// sqlStoreAnswer stores an answer the flow did not store in its
	// transaction (a refusal before the claim, or after a rollback), in
	// one statement of its own. It takes the key's advisory lock too (try,
	// never wait), and it inserts the completed key, or completes this
	// request's own claim left by a committed phase; a key another request
	// holds or completed is left alone. Where the key may have another
	// name, it runs in a transaction after sqlKeyLock, as a claim does.
	sqlStoreAnswer = `
WITH lock AS (
	SELECT ` + claimLock + ` AS held
), ` + storeAnswer

	// sqlStoreOwnAnswer is sqlStoreAnswer for a request whose committed
	// phase left its claim on the key (a 202 after the first phase of a
	// payment): it waits for the key's advisory lock, as sqlCompleteInTx
	// does, behind a copy being refused or a request taking the key over,
	// each a short transaction; FinishTimeout bounds the wait. A try that
	// gave up would take such a copy (a client retrying the same key)
	// for the key's owner: the request's own answer would become
	// request_in_progress, and its claim would stay held until its lease
	// ran out. It is sent with the names the claim was made with, so that a
	// claim that rolled back meanwhile is stored under the name the key
	// has now, like any answer.
	sqlStoreOwnAnswer = `
WITH lock AS (
	SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)) IS NOT NULL AS held
), ` + storeAnswer

	// storeAnswer is the write of sqlStoreAnswer and sqlStoreOwnAnswer,
	// made once the key's advisory lock is held: $7 and $8 name the
	// record as in sqlClaimInTx, $9 is the scheme, $10–$13 the answer.
	storeAnswer = `stored AS (
	INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, created_at,
	                              scheme, status_code, headers, body, completed_at)
	SELECT $1, ` + recordName + `, $3, $4, $5, $6, $9, $10, $11, $12, $13 FROM lock WHERE lock.held
	ON CONFLICT (principal, key) DO UPDATE
	   SET status_code = EXCLUDED.status_code, headers = EXCLUDED.headers,
	       body = EXCLUDED.body, completed_at = EXCLUDED.completed_at
	 WHERE idempotency_keys.owner = EXCLUDED.owner AND idempotency_keys.status_code IS NULL
	RETURNING 1
)
SELECT lock.held, EXISTS (SELECT 1 FROM stored) FROM lock`
)

// claimArgs are the arguments of sqlClaimInTx and sqlReclaimInTx.
func (r *Record) claimArgs() []any {
	return []any{r.principal, r.names.Lock, r.fp, r.owner, r.at.Add(r.store.lease), r.at,
		r.names.Write, r.names.Other, r.names.Scheme}
}

// Claim claims the key as one of the first statements of tx:
// pg_try_advisory_xact_lock on (principal, key), so that a concurrent
// duplicate is refused at once (request_in_progress) instead of waiting
// inside PostgreSQL on the unique index and holding a pool connection;
// then the insert of the claim, or the takeover of a claim whose lease ran
// out (only for the same fingerprint), in ONE statement that also returns
// the existing row when the key is taken. When the key is not this
// request's it returns a *Refusal (use errors.As); the flow rolls back and
// returns it unchanged (wrap only with %w), and the middleware answers it.
//
// A later transaction of the same request (a two-phase flow's second
// phase, or a try after a rollback) calls Claim again as its first
// statement, and claims again without writing (sqlReclaimInTx): the key is
// still this request's own claim, and the phase holds its lock (the lease
// stays the one the request began with, as does the handler's deadline),
// or it was taken over after the lease ran out, and the stale phase is
// refused before it acts on anything.
func (r *Record) Claim(ctx context.Context, tx pgx.Tx) error {
	if r == nil {
		return nil
	}
	b := &pgx.Batch{}
	r.QueueClaim(b)
	return tx.SendBatch(ctx, b).Close()
}

// QueueClaim queues the same statements in a pgx.Batch so that they
// travel with the transaction's next statements in one round trip; the
// refusal comes back as the error of BatchResults.Close. The statements
// queued after them run even when the claim is refused (then they are
// rolled back): queue there only what cannot wait for a lock that another
// request of the key holds, or send them in the next round trip.
func (r *Record) QueueClaim(b *pgx.Batch) {
	if r == nil {
		return
	}
	if !r.claimed {
		// held is the key's try-lock as sqlKeyLock took it, when there is
		// another name to read under it.
		held := true
		if r.names.Other != "" {
			b.Queue(sqlKeyLock, r.principal, r.names.Lock).QueryRow(func(row pgx.Row) error {
				if err := row.Scan(&held); err != nil {
					return fmt.Errorf("lock idempotency key %q: %w", r.key, err)
				}
				return nil
			})
		}
		b.Queue(sqlClaimInTx, r.claimArgs()...).QueryRow(func(row pgx.Row) error {
			if !held {
				return &Refusal{}
			}
			return r.decide(false, row)
		})
		return
	}
	var held bool
	b.Queue(sqlReclaimInTx, r.claimArgs()...).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&held); err != nil {
			return fmt.Errorf("claim idempotency key %q again: %w", r.key, err)
		}
		return nil
	})
	b.Queue(sqlReclaimedRow, r.principal, r.owner, r.names.Write, r.names.Other).QueryRow(func(row pgx.Row) error {
		if !held {
			return &Refusal{}
		}
		return r.decide(true, row)
	})
}

// decide reads a claim's row: this request's claim, or the refusal. The
// row begins with the answer of the key's try-lock unless held says that
// it was taken by an earlier statement.
func (r *Record) decide(held bool, row pgx.Row) error {
	var (
		name      *string
		mine      bool
		fp        []byte
		firstSeen *time.Time
		status    *int
		headers   []byte
		body      []byte
		scheme    *int16
	)
	dest := []any{&name, &mine, &fp, &firstSeen, &status, &headers, &body, &scheme}
	if !held {
		dest = append([]any{&held}, dest...)
	}
	if err := row.Scan(dest...); err != nil {
		return fmt.Errorf("claim idempotency key %q: %w", r.key, err)
	}
	if !held {
		return &Refusal{}
	}
	s := r.store
	if scheme != nil && int(*scheme) != s.scheme.Version && !r.crossed {
		// Once a request: a two-phase flow meets its record again.
		r.crossed = true
		s.counters.crossScheme(r.flow, int(*scheme))
	}
	st := &stored{fingerprint: fp}
	if firstSeen != nil {
		st.firstSeen = *firstSeen
	}
	if !mine {
		if status != nil {
			resp, err := storedResponse(*status, headers, body)
			if err != nil {
				return fmt.Errorf("idempotency key %q: %w", r.key, err)
			}
			st.response = resp
		}
		return &Refusal{prev: st}
	}
	if r.claimed {
		// This request's own claim, again in a later transaction; under the
		// name the key has now, if the claim rolled back and was made again
		// (sqlReclaimInTx).
		r.name = *name
		return nil
	}
	r.claimed, r.firstSeen, r.name = true, st.firstSeen, *name
	if st.firstSeen.Equal(r.at) {
		s.outcome(r, outcomeClaimed)
		return nil
	}
	s.outcome(r, outcomeTakenOver)
	s.counters.repeat(r.flow, st.firstSeen, r.at)
	s.logger.Info("idempotency key taken over after its lease ran out", "flow", r.flow, "principal", r.principal, "key", r.key)
	return nil
}

// Taken is asked by a flow whose lock another request holds, before it
// answers resource_busy: when this request's key is another request's,
// claimed by a copy of this request that is still running or completed
// by one, it returns the *Refusal the claim would have returned, and the
// middleware answers it as every keyed route does (request_in_progress,
// the stored answer, idempotency_key_reused). It returns nil when the key
// is free (the lock is another request's), or when the read fails: the
// flow's own answer stands.
func (r *Record) Taken(ctx context.Context) error {
	if r == nil || r.claimed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.store.finishTimeout)
	defer cancel()
	st, err := r.store.readKey(ctx, r.principal, r.names)
	if err != nil {
		return nil
	}
	return &Refusal{prev: st}
}

// Complete stores the answer in tx, as its last statement before COMMIT
// (fenced by the owner token written by Claim). It reports whether it
// stored it: false means another request took the key over after this
// one's lease ran out (only possible between the transactions of a
// two-phase flow such as a payment); not an error. After a successful
// commit the handler sends exactly the stored bytes (Send), so a replay is
// byte for byte the first answer.
func (r *Record) Complete(ctx context.Context, tx pgx.Tx, a Answer) (bool, error) {
	if r == nil {
		return false, nil
	}
	resp, args, err := r.completion(a)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, sqlCompleteInTx, args...)
	if err != nil {
		return false, fmt.Errorf("complete idempotency key %q: %w", r.key, err)
	}
	return r.completed(tag, resp), nil
}

// QueueComplete queues the same in a batch. Whether it stored the answer
// is known once the batch's results are closed; Send asks.
func (r *Record) QueueComplete(b *pgx.Batch, a Answer) error {
	if r == nil {
		return nil
	}
	resp, args, err := r.completion(a)
	if err != nil {
		return err
	}
	b.Queue(sqlCompleteInTx, args...).Exec(func(tag pgconn.CommandTag) error {
		r.completed(tag, resp)
		return nil
	})
	return nil
}

// completion encodes a and returns the arguments of sqlCompleteInTx.
func (r *Record) completion(a Answer) (*response, []any, error) {
	resp, err := a.encode()
	if err != nil {
		return nil, nil, err
	}
	headers, err := json.Marshal(resp.headers)
	if err != nil {
		return nil, nil, fmt.Errorf("encode headers: %w", err)
	}
	now := r.store.now().UTC().Truncate(time.Microsecond)
	return resp, []any{r.principal, r.names.Lock, r.name, r.owner, resp.status, headers, resp.body, now}, nil
}

// completed records what sqlCompleteInTx did and reports whether it stored
// the answer.
func (r *Record) completed(tag pgconn.CommandTag, resp *response) bool {
	r.completeRan = true
	if tag.RowsAffected() != 1 {
		r.answer = nil
		return false
	}
	r.answer = resp
	return true
}

// storedResponse decodes a stored answer.
func storedResponse(status int, headers, body []byte) (*response, error) {
	r := &response{status: status, body: body}
	if len(headers) > 0 {
		if err := json.Unmarshal(headers, &r.headers); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return r, nil
}

// spanAttributes are what the request's idempotency span says once the
// request is over.
func (r *Record) spanAttributes() []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	if r.outcome != "" {
		attrs = append(attrs, attrOutcome.String(r.outcome))
	}
	if r.completeRan {
		attrs = append(attrs, attrStored.Bool(r.answer != nil))
	}
	if r.result != "" {
		attrs = append(attrs, attrResult.String(r.result))
	}
	return attrs
}
