package mailer

import (
	"errors"
	"fmt"
	"time"

	"github.com/shop-example/shop/internal/platform/mail"
)

// check reports whether apply can use m: the journal refuses to write a
// message that fails it, and refuses to start from one.
func check(m Message) error {
	switch {
	case m.ID == "" || m.IdempotencyKey == "" || m.CreatedAt.IsZero():
		return errors.New("incomplete message record")
	case !mail.KnownKind(m.Kind):
		return fmt.Errorf("message %s: unknown kind %q", m.ID, m.Kind)
	}
	return nil
}

// index is what the journal is replayed into: every message, and for each
// key the last message it sent. It is not safe for concurrent use:
// Server.mu guards it.
type index struct {
	messages []Message      // in creation order: the audit
	byID     map[string]int // id → position in messages
	byKey    map[string]int // key → position of the last message it sent
}

func newIndex() *index {
	return &index{byID: map[string]int{}, byKey: map[string]int{}}
}

// apply adds one checked message to the index. It is the only writer, used
// both when the journal is replayed and after each append, so a restart
// rebuilds exactly what the running process had. A key sends a second
// message only once it was forgotten, so the later message is the one
// the key now remembers.
func (x *index) apply(m Message) {
	x.byID[m.ID] = len(x.messages)
	x.byKey[m.IdempotencyKey] = len(x.messages)
	x.messages = append(x.messages, m)
}

// remembered returns the message key sent, if the key is still remembered
// at now: it is forgotten once it is more than ttl older than that message.
func (x *index) remembered(key string, now time.Time, ttl time.Duration) (Message, bool) {
	i, ok := x.byKey[key]
	if !ok {
		return Message{}, false
	}
	m := x.messages[i]
	if now.Sub(m.CreatedAt) > ttl {
		return Message{}, false
	}
	return m, true
}

// messagesFor returns the messages with reference and kind ("" = any), in
// creation order.
func (x *index) messagesFor(reference, kind string) []Message {
	out := []Message{}
	for _, m := range x.messages {
		if (reference == "" || m.Reference == reference) && (kind == "" || m.Kind == kind) {
			out = append(out, m)
		}
	}
	return out
}

// message returns the message with id.
func (x *index) message(id string) (Message, bool) {
	i, ok := x.byID[id]
	if !ok {
		return Message{}, false
	}
	return x.messages[i], true
}
