package ablation

import "github.com/shop-example/shop/internal/platform/layers"

func off(ls ...layers.Layer) layers.Set { return layers.Off(ls...) }

const (
	idem, lck, state, version, constraint = layers.Idempotency, layers.Lock, layers.State, layers.Version, layers.Constraint
)

// Flows are the matrices docs/ABLATION.md shows, in its order.
func Flows() []Flow {
	return []Flow{CreateOrder(), CancelOrder(), PayOrder(), RefundOrder(), LikePost(), HoldSeats(), FulfilOrder(), MailReceipt()}
}

// CreateOrder is the matrix of POST /v1/orders (TestAblation_CreateOrder).
func CreateOrder() Flow {
	return Flow{Name: "create_order", Test: "TestAblation_CreateOrder",
		Absent: map[layers.Layer]string{
			state: "creating an order has no state rule: an order is born pending, there is no move to refuse",
		},
		// Through the route, the idempotency claim's advisory lock on
		// (user, key) is the lock: Create takes the Redis lock only when
		// the request has no idempotency record (idempotency.RecordFrom),
		// so the lock acts only with layer 0 off.
		With: map[layers.Layer][]layers.Layer{lck: {idem}},
		Rows: []Row{
			{Why: "every layer: the idempotency claim's advisory lock on (user, key), in the order's transaction, serialises a request's copies, the conditional decrement sells only what is in stock"},
			{Layers: off(idem), Why: "no claim: the Redis lock on order:{user}:{key} serialises a request's copies, and the second finds the first order (orders_user_request_key)"},
			{Layers: off(idem, lck), Why: "neither the claim nor the lock (with the claim held, its advisory lock is the lock): a request's copies race, and orders_user_request_key refuses the second order, whose stock rolls back with it; the first order is returned"},
			{Layers: off(version), Why: "the decrement without its condition: products_stock_nonnegative refuses the oversell"},
			{Layers: off(constraint), Why: "the conditional decrement sells only what is in stock; the claim stops a request's copies"},
			{Layers: off(version, constraint), Breaks: true,
				Why: "a decrement with no condition and no CHECK sells stock it does not have: units sold exceed the stock"},
			{Layers: off(version), Variant: "read-check-write", Breaks: true,
				Why: "buyers read the same stock and each writes its own difference back: lost updates, units sold exceed the units taken from stock, which the CHECK cannot see (it refuses only a count below zero). Stock is a counter: its conditional decrement is its one guard against a lost update"},
			{Layers: off(idem, lck, constraint), Breaks: true,
				Why: "nothing serialises a request's copies and nothing refuses the second order: each copy creates one, two orders for one Idempotency-Key"},
		}}
}

// CancelOrder is the matrix of POST /v1/orders/{id}/cancel
// (TestAblation_CancelOrder).
func CancelOrder() Flow {
	return Flow{Name: "cancel_order", Test: "TestAblation_CancelOrder",
		Absent: map[layers.Layer]string{
			idem: "cancel takes no Idempotency-Key: it is idempotent by meaning, a second cancel of a cancelled order returns it unchanged",
		},
		Rows: []Row{
			{Why: "every layer"},
			{Layers: off(lck), Why: "the state rule on the row read, written at its version: one cancel wins, the others re-read a cancelled order"},
			{Layers: off(state), Why: "the version check and the lock: a second cancel that read the order before the first is refused, and stock_releases_pkey refuses a second release"},
			{Layers: off(version), Why: "the lock serialises the cancels, and each reads the one before's result"},
			{Layers: off(constraint), Why: "the state rule and the version check"},
			{Layers: off(layers.Database...), Breaks: true,
				Why: "with no state rule every cancel cancels again and returns the stock: the lock serialises them, but has no rule to apply. An order's stock comes back more than once"},
			{Layers: off(version, constraint), Why: "the lock alone: the state rule is asked of a row no other cancel is writing"},
			{Layers: off(lck, version, constraint), Breaks: true,
				Why: "the race the version check exists for: cancels read the order before any of them commits, all see it pending, all return the stock"},
		}}
}

// PayOrder is the matrix of POST /v1/orders/{id}/pay (TestAblation_PayOrder).
func PayOrder() Flow {
	return Flow{Name: "pay_order", Test: "TestAblation_PayOrder",
		Rows: []Row{
			{Why: "every layer"},
			{Layers: off(idem), Why: "the lock on payment:{order}, the order's paying state and the partial unique index"},
			{Layers: off(lck), Why: "the order's state, written at the version read: the first payment moves it to paying, and the others find it so"},
			{Layers: off(lck, constraint), Why: "the version-checked write alone beside the state rule: of clicks that all read the order pending, one moves it to paying at that version; the others' writes find a newer version, re-read the order paying and are refused"},
			{Layers: off(state), Why: "the lock serialises the clicks; payments_one_active_per_order refuses a second payment beside a processing or succeeded one"},
			{Layers: off(version), Why: "the lock and the order's state"},
			{Layers: off(constraint), Why: "the lock and the order's state"},
			{Layers: off(layers.Database...), Breaks: true,
				Why: "with no state rule a click after the first payment settled begins another, and no index refuses it: a second charge (the books audit counts the order)"},
			{Layers: off(version, constraint), Variant: "stale-look", Breaks: true,
				Why: "the lock holds the clicks apart, not their reads: the state rule is asked of the order as read before the lock, so a click that read it pending before the first payment began, and takes the lock after that payment settled, begins a second one and charges it; only the version check sees the read is stale. Made certain here: every look returns the order's first read"},
			{Layers: off(lck, version, constraint), Breaks: true,
				Why: "the race the version check exists for: clicks read the order before any of them commits, all see it pending, each begins a payment and charges it"},
		}}
}

// RefundOrder is the matrix of POST /v1/orders/{id}/refunds
// (TestAblation_RefundOrder), run with the processor's own check off: it
// refunds whatever it is asked, so each row shows what the shop's layers
// hold alone.
func RefundOrder() Flow {
	return Flow{Name: "refund_order", Test: "TestAblation_RefundOrder",
		Rows: []Row{
			{Why: "every layer: the order's advisory lock serialises the agents, each reads what the one before held, and the rule refuses a refund beyond what is left (422)"},
			{Layers: off(idem), Why: "no claim: a request's copies queue on the order's lock, and each after the first finds the refund of its key (read under the lock) and answers that one"},
			{Layers: off(lck), Why: "the rule on the order read, written at the version read: of agents that all read the order with nothing refunded, one writes it; the others find a newer version, read it again and are refused"},
			{Layers: off(state), Why: "the rule asked as if nothing were refunded lets every agent's 60 % through; orders_refunded_within_total refuses each write that would take what the order's refunds hold past its total"},
			{Layers: off(version), Why: "the lock serialises the agents, and each reads what the one before held"},
			{Layers: off(constraint), Why: "the lock, the rule and the version check"},
			{Layers: off(layers.Database...), Breaks: true,
				Why: "with no rule and no CHECK the lock serialises the agents but has no rule to apply: each one's 60 % is held and the processor, its own check off, refunds it. More given back than was captured"},
			{Layers: off(version, constraint), Why: "the lock alone: the rule is asked of an order no other refund is writing"},
			{Layers: off(lck, constraint), Why: "the version check alone beside the rule: one agent's write finds the version it read, the others' find a newer one, read again and are refused"},
			{Layers: off(lck, version), Why: "the CHECK alone against the race: agents read the order untouched and all pass the rule, but each write adds its amount to what the order holds, never a value read before, and orders_refunded_within_total refuses the one that would pass the total"},
			{Layers: off(lck, version, constraint), Breaks: true,
				Why: "the race the version check exists for: agents read the order before any of them commits, all see nothing refunded, each holds its 60 % on top and the processor refunds it: hyperswitch#13182's 120 %"},
		}}
}

// LikePost is the matrix of PUT and DELETE /v1/posts/{id}/like
// (TestAblation_Like).
func LikePost() Flow {
	return Flow{Name: "like_post", Test: "TestAblation_Like",
		Absent: map[layers.Layer]string{
			idem: "likes take no Idempotency-Key by design: PUT and DELETE are idempotent by meaning",
		},
		Rows: []Row{
			{Why: "every layer"},
			{Layers: off(lck), Why: "the version check refuses a click that read the like before its twin wrote it, and likes_pkey a second first like; the loser re-reads and finds the like made"},
			{Layers: off(state), Why: "the counter moves by what the write changed in the row, not by what was asked: a click that likes a liked post writes it again but counts nothing"},
			{Layers: off(version), Why: "the lock serialises one user's clicks: each reads what the one before wrote"},
			{Layers: off(constraint), Why: "the lock serialises one user's clicks, so no two of them insert the first like row"},
			{Layers: off(layers.Database...), Why: "the lock alone: each click reads the last one's write, and the counter moves by what that write changed"},
			{Layers: off(lck, version), Breaks: true,
				Why: "the race the version check exists for: clicks read the unliked row before any of them writes, and each writes liked and counts one. The count exceeds the users who like the post, and post_like_shards_n_nonnegative refuses an unlike whose like its counter row never had (each refusal, named in the logged error, counts)"},
			{Layers: off(lck, constraint), Breaks: true,
				Why: "two first likes find no row and each inserts one: without likes_pkey the duplicate row is inserted and counted"},
		}}
}

// HoldSeats is the matrix of POST /v1/events/{id}/holds and its confirm
// (TestAblation_HoldSeats).
func HoldSeats() Flow {
	return Flow{Name: "hold_seats", Test: "TestAblation_HoldSeats",
		Rows: []Row{
			{Why: "every layer"},
			{Layers: off(idem), Why: "a request's copies want the same seats: the lock serialises them and the second finds the seats held"},
			{Layers: off(lck), Why: "the conditional write: of two holds that read the same available seat, one writes it and the other writes nothing and re-reads it held"},
			{Layers: off(state), Breaks: true,
				Why: "no rule on the seats read and no status = 'available' in their write: a hold that reads a booked seat writes it held at the version it read. hold_seats_one_active_per_seat refuses a second active hold, but a booked seat's hold is no longer active, so nothing else says a booked seat is not to be held: the seat reads held while its ticket stands, and tickets_one_per_seat refuses the second ticket"},
			{Layers: off(version), Why: "the lock per seat serialises overlapping holds, and each reads the one before's seats"},
			{Layers: off(constraint), Why: "the state rule on the seats read, and their write conditioned on it at their version"},
			{Layers: off(layers.Database...), Breaks: true,
				Why: "with no state rule and no condition in the write a hold takes seats another holds, and no index refuses it: two holds, then two tickets, on one seat"},
			{Layers: off(lck, constraint), Why: "the version check stops the read-then-write race"},
			{Layers: off(lck, version, constraint), Why: "the state rule asked again in the write (status = 'available'): of two holds that read a seat available, the second's write finds it held, writes nothing, and re-reads it"},
			{Layers: off(lck, state, version, constraint), Breaks: true,
				Why: "nothing serialises the holds and nothing conditions their write: holds read the same seats available before any of them commits, and each writes them held"},
		}}
}

// FulfilOrder is the matrix of the fulfilment, the consumer of order.paid
// that ships each paid order once (TestAblation_FulfilOrder). Its layers
// are the consumer's: the pay flow that wrote the events keeps all of
// its own.
func FulfilOrder() Flow {
	return Flow{Name: "fulfil_order", Test: "TestAblation_FulfilOrder",
		Rows: []Row{
			{Why: "every layer: the first copy to commit its inbox row wins, and a copy that races it waits on that row and finds it written"},
			{Layers: off(idem), Why: "no inbox: the order's advisory lock serialises the copies in their transactions, and each after the first finds the order fulfilled (the state rule)"},
			{Layers: off(lck), Why: "the inbox row, in the move's transaction: copies that read the order at once each insert it, and the second waits for the first to commit and then inserts nothing"},
			{Layers: off(state), Why: "the inbox: a copy that would fulfil a fulfilled order never gets that far"},
			{Layers: off(version), Why: "the inbox and the lock"},
			{Layers: off(constraint), Why: "the inbox and the lock"},
			{Layers: off(layers.Database...), Why: "the inbox and the lock alone: the inbox row decides, in the transaction that would make the move"},
			{Layers: off(lck, layers.State, version, constraint), Why: "the inbox alone: a consumer's inbox row is a unique key on (consumer, event), written in the same transaction as the effect, so two copies of one event cannot both commit it"},
			{Layers: off(idem, layers.State, version, constraint), Breaks: true,
				Why: "no inbox and no rule: the order's advisory lock serialises the copies, but each applies no rule to the order it reads, writes fulfilled again and ships it again. An order shipped more than once (two fulfilment rows)"},
			{Layers: off(idem, lck, version, constraint), Breaks: true,
				Why: "the race the version check exists for: copies read the order paid before any of them commits, each moves it to fulfilled, and nothing refuses the second shipment"},
		}}
}

// PublishAfterCommit is MailReceipt's variant without the outbox: the pay
// flow publishes its events once it has committed.
const PublishAfterCommit = "publish after the commit"

// MailReceipt is the matrix of the receipts, the mail consumer of
// order.paid (TestAblation_MailReceipt). Its one layer of its own is the
// inbox; its variant takes the outbox away from the pay flow that writes
// the events.
func MailReceipt() Flow {
	return Flow{Name: "mail_receipt", Test: "TestAblation_MailReceipt",
		Absent: map[layers.Layer]string{
			lck:          "the mail takes no lock: no transaction is open during the provider call, and copies that race each other are one mail by the provider's key (the event's id)",
			layers.State: "the receipt is sent only for an order that was paid (paid, or fulfilled or refunded since), and an order.paid is in the outbox only for a payment that committed: the rule can only say yes, so a row without it would switch nothing. The refund mail's rule is the same kind (a refund that succeeded, and order.refunded is written only by the settle of one), and the refund mail has no layer the receipt has not",
			version:      "the mail writes no row of the shop's but its inbox row: there is no version to check",
			constraint:   "the inbox's key (inbox_pkey) is named in its ON CONFLICT and stays; the mail itself is the provider's",
		},
		Rows: []Row{
			{Why: "the inbox: every copy after the first finds the event's row and sends nothing, long after the provider forgot the key"},
			{Layers: off(idem), Breaks: true,
				Why: "no inbox: each copy that comes after the provider forgot the event's key is a new mail. Receipts sent more than once"},
			{Variant: PublishAfterCommit, Breaks: true,
				Why: "no outbox: the pay flow publishes its event after its commit, and a process that dies between the two (every third publish dropped) loses it. Paid orders with no receipt, and no row left to redeliver them from"},
		}}
}
