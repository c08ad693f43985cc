package seats

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/platform/ids"
)

// The reads of the seat flows, and the making of an event: no race to
// stop, so no layer but the admin's token on the route.

// CreateEvent creates an event with rows × perRow seats, all available.
func (s *Service) CreateEvent(ctx context.Context, name string, rows, perRow int) (Event, error) {
	if err := ValidateEvent(name, rows, perRow); err != nil {
		return Event{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("new event id: %w", err)
	}
	ev := Event{ID: id.String(), Name: name, Rows: rows, SeatsPerRow: perRow, CreatedAt: s.stamp(), Available: rows * perRow}
	if err := s.store.CreateEvent(ctx, ev); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Event returns an event with its counts.
func (s *Service) Event(ctx context.Context, id string) (Event, error) {
	if !ids.Valid(id) {
		return Event{}, ErrNotFound
	}
	return s.store.Event(ctx, id)
}

// SeatMap returns an event's seats in seat order.
func (s *Service) SeatMap(ctx context.Context, id string) ([]Seat, error) {
	if !ids.Valid(id) {
		return nil, ErrNotFound
	}
	m, err := s.store.SeatMap(ctx, id)
	if err == nil && len(m) == 0 {
		return nil, ErrNotFound
	}
	return m, err
}

// Booking returns userID's booking.
func (s *Service) Booking(ctx context.Context, userID, id string) (Booking, error) {
	if !ids.Valid(id) {
		return Booking{}, ErrNotFound
	}
	return s.store.Booking(ctx, id, userID)
}

// ActiveHolds returns a page of userID's active holds, newest first: a
// client that lost the answer to a hold finds it here.
func (s *Service) ActiveHolds(ctx context.Context, userID, cursor string, limit int) ([]Hold, string, error) {
	return s.store.ActiveHolds(ctx, userID, s.stamp(), cursor, limit)
}

// HoldOf returns userID's hold.
func (s *Service) HoldOf(ctx context.Context, userID, id string) (Hold, error) {
	if !ids.Valid(id) {
		return Hold{}, ErrNotFound
	}
	return s.store.HoldOf(ctx, id, userID)
}
